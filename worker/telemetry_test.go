package worker_test

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/telemetry"
	"github.com/paddockhq/paddock/worker"
)

// One job is one connected trace: client submit → scheduler → asynq
// process → sandbox acquire → attempt, over real NATS, Redis and Docker.
func TestOneTracePerJobAndMetrics(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prov, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "paddock-test"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = prov.Shutdown(context.Background()) })
	m, err := telemetry.NewMetrics(prov.MeterProvider().Meter("test"))
	require.NoError(t, err)

	s := newStack(t, func(c *worker.Config) {
		c.TracerProvider = tp
		c.MeterProvider = prov.MeterProvider()
		c.Metrics = m
	})
	ok := s.run(job.Spec{Command: "echo traced"})
	bad := s.run(job.Spec{Command: "exit 4"})
	require.Equal(t, job.StateSucceeded, ok.State)
	require.Equal(t, job.ReasonExitNonzero, bad.Reason)

	byJob := func(id string) map[string]sdktrace.ReadOnlySpan {
		var trace string
		// The worker's process span carries the job id; everything else
		// must share its trace id.
		require.Eventually(t, func() bool {
			for _, sp := range rec.Ended() {
				for _, a := range sp.Attributes() {
					if a.Key == telemetry.AttrJobID && a.Value.AsString() == id && sp.SpanKind().String() == "consumer" && sp.Name() != "paddock.schedule" {
						trace = sp.SpanContext().TraceID().String()
						return true
					}
				}
			}
			return false
		}, 10*time.Second, 20*time.Millisecond)
		out := map[string]sdktrace.ReadOnlySpan{}
		for _, sp := range rec.Ended() {
			if sp.SpanContext().TraceID().String() == trace {
				out[sp.Name()] = sp
			}
		}
		return out
	}
	spans := byJob(ok.ID)
	for _, name := range []string{"paddock.submit", "paddock.schedule", "process default", "paddock.sandbox.acquire", "paddock.attempt"} {
		assert.Contains(t, spans, name, "span %s missing from the job's trace", name)
	}
	if acq := spans["paddock.sandbox.acquire"]; acq != nil {
		keys := map[string]bool{}
		for _, a := range acq.Attributes() {
			keys[string(a.Key)] = true
		}
		assert.True(t, keys["paddock.pool.hit"] && keys["container.name"], "the acquire span says whether the pool served it, and which container: %v", acq.Attributes())
	}
	if sub, att := spans["paddock.submit"], spans["paddock.attempt"]; sub != nil && att != nil {
		assert.False(t, sub.Parent().IsValid(), "submit is the root")
		assert.Equal(t, spans["process default"].SpanContext().SpanID(), att.Parent().SpanID())
	}

	failed := byJob(bad.ID)
	require.Contains(t, failed, "paddock.attempt")
	attrs := map[string]string{}
	for _, a := range failed["paddock.attempt"].Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	assert.Equal(t, "exit_nonzero", attrs["error.type"])
	assert.Equal(t, "4", attrs["process.exit.code"])
	assert.Equal(t, "Error", failed["process default"].Status().Code.String())

	srv := httptest.NewServer(prov.MetricsHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	assert.Contains(t, text, `paddock_jobs_finished_total{`)
	assert.Contains(t, text, `paddock_job_reason="exit_nonzero"`)
	assert.Contains(t, text, `paddock_job_run_duration_seconds_bucket`)
	assert.Contains(t, text, `paddock_pool_size`)
}
