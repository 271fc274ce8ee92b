package telemetry

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// writeJobTraces writes two jobs' traces through Setup's span file, the way
// the client, scheduler and worker would (several services, one file), and
// returns the file and job j-1's trace id.
func writeJobTraces(t *testing.T) (path, traceID string) {
	t.Helper()
	clearOTelEnv(t)
	path = filepath.Join(t.TempDir(), "spans.jsonl")
	ctx := context.Background()
	setup := func(service string) (trace.Tracer, func()) {
		p, err := Setup(ctx, Config{ServiceName: service, SpanFile: path})
		require.NoError(t, err)
		return p.TracerProvider().Tracer("test"), func() { require.NoError(t, p.Shutdown(ctx)) }
	}
	client, stopClient := setup("client")
	worker, stopWorker := setup("worker")

	for _, job := range []string{"j-1", "j-2"} {
		sctx, submit := client.Start(ctx, "send paddock.jobs.submit",
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(AttrJobID.String(job)))
		// The worker continues the trace from the wire, as it would from task headers.
		h := map[string]string{}
		InjectMap(sctx, h)
		pctx, process := worker.Start(ExtractMap(ctx, h), "process default",
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(AttrJobID.String(job)))
		a1Start := time.Now()
		_, a1 := worker.Start(pctx, "attempt", trace.WithTimestamp(a1Start),
			trace.WithAttributes(AttrAttempt.Int(1), AttrExitCode.Int(127), AttrReason.String("exit_nonzero")))
		a1.SetStatus(codes.Error, "command not found")
		a1.End(trace.WithTimestamp(a1Start.Add(time.Millisecond)))
		_, heal := worker.Start(pctx, "heal", trace.WithAttributes(AttrHealAction.String("install"), AttrHealOutcome.String("fixed")))
		heal.End()
		_, a2 := worker.Start(pctx, "attempt", trace.WithAttributes(AttrAttempt.Int(2), AttrExitCode.Int(0), AttrReason.String("ok")))
		a2.End()
		process.End()
		submit.End()
		if job == "j-1" {
			traceID = submit.SpanContext().TraceID().String()
		}
	}
	stopWorker()
	stopClient()
	return path, traceID
}

var durationRE = regexp.MustCompile(`\d+(\.\d+)?(µs|ms|s)\b`)

func TestReadSpansAndRenderTree(t *testing.T) {
	path, traceID := writeJobTraces(t)

	byJob, err := ReadSpans(path, "j-1")
	require.NoError(t, err)
	require.Len(t, byJob, 5, "the whole trace, spans without the job id included")
	for _, s := range byJob {
		assert.Equal(t, traceID, s.TraceID)
	}
	byTrace, err := ReadSpans(path, strings.ToUpper(traceID))
	require.NoError(t, err)
	assert.Equal(t, byJob, byTrace)

	all, err := ReadSpans(path, "")
	require.NoError(t, err)
	assert.Len(t, all, 10)
	none, err := ReadSpans(path, "j-3")
	require.NoError(t, err)
	assert.Empty(t, none)

	var out bytes.Buffer
	require.NoError(t, RenderTree(&out, byJob))
	want := "trace " + traceID + "  5 spans  D\n" +
		"send paddock.jobs.submit [client] producer D @+D paddock.job.id=j-1\n" +
		"  process default [worker] consumer D @+D\n" +
		"    attempt [worker] D @+D paddock.attempt=1 process.exit.code=127 paddock.job.reason=exit_nonzero ERROR \"command not found\"\n" +
		"    heal [worker] D @+D paddock.heal.action=install paddock.heal.outcome=fixed\n" +
		"    attempt [worker] D @+D paddock.attempt=2 process.exit.code=0 paddock.job.reason=ok\n"
	assert.Equal(t, want, durationRE.ReplaceAllString(out.String(), "D"))
}

func TestRenderTreeOrphansAndTraces(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spans := []SpanRecord{
		{TraceID: "a", SpanID: "1", ParentSpanID: "gone", Name: "process", Start: t0, End: t0.Add(1500 * time.Millisecond)},
		{TraceID: "a", SpanID: "2", ParentSpanID: "1", Name: "attempt", Start: t0.Add(250 * time.Microsecond), End: t0.Add(time.Second)},
		{TraceID: "b", SpanID: "3", ParentSpanID: "4", Name: "x", Start: t0, End: t0},
		{TraceID: "b", SpanID: "4", ParentSpanID: "3", Name: "y", Start: t0, End: t0}, // a cycle
	}
	var out bytes.Buffer
	require.NoError(t, RenderTree(&out, spans))
	assert.Equal(t,
		"trace a  2 spans  1.50s\n"+
			"process 1.50s @+0µs (parent not recorded)\n"+
			"  attempt 999.8ms @+250µs\n"+
			"\n"+
			"trace b  2 spans  0µs\n"+
			"x 0µs @+0µs\n"+
			"  y 0µs @+0µs\n", out.String())
}

func TestReadSpansSkipsTornLines(t *testing.T) {
	path, traceID := writeJobTraces(t)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"trace_id":"` + traceID + `","span_id":"ff","name":"torn`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	spans, err := ReadSpans(path, traceID)
	require.NoError(t, err)
	assert.Len(t, spans, 5)
}

func TestReadSpansMissingFile(t *testing.T) {
	t.Parallel()
	_, err := ReadSpans(filepath.Join(t.TempDir(), "none.jsonl"), "")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// FuzzReadSpans feeds arbitrary file content to ReadSpans and RenderTree:
// neither may panic or loop.
func FuzzReadSpans(f *testing.F) {
	f.Add([]byte(`{"trace_id":"a","span_id":"1","name":"n","start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:00:01Z"}` + "\n"))
	f.Add([]byte(`{"trace_id":"a","span_id":"1","parent_span_id":"1","attributes":{"paddock.job.id":"j"}}` + "\n{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "spans.jsonl")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		for _, filter := range []string{"", "a", "j"} {
			spans, err := ReadSpans(path, filter)
			require.NoError(t, err)
			var out bytes.Buffer
			require.NoError(t, RenderTree(&out, spans))
		}
	})
}
