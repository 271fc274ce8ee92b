package telemetry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// scrape returns MetricsHandler's /metrics body.
func scrape(t *testing.T, p *Provider) string {
	t.Helper()
	srv := httptest.NewServer(p.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// newQuietProvider sets up a provider with no exporters and no logs.
func newQuietProvider(t *testing.T) *Provider {
	t.Helper()
	clearOTelEnv(t)
	p, err := Setup(context.Background(), Config{ServiceName: "test", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Shutdown(context.Background())) })
	return p
}

// assertSeries checks that body has a sample line starting with name and
// holding every label.
func assertSeries(t *testing.T, body, name string, labelsAndValue ...string) {
	t.Helper()
	for line := range strings.SplitSeq(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, s := range labelsAndValue {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			return
		}
	}
	t.Errorf("no %s series with %q in:\n%s", name, labelsAndValue, body)
}

// seriesValue returns the value of the first sample of name with label.
func seriesValue(t *testing.T, body, name, label string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			require.NoError(t, err, line)
			return v
		}
	}
	t.Fatalf("no %s{%s} in:\n%s", name, label, body)
	return 0
}

func TestMetricsScrape(t *testing.T) {
	p := newQuietProvider(t)
	m, err := NewMetrics(p.MeterProvider().Meter("test"))
	require.NoError(t, err)
	ctx := context.Background()

	m.Submission(ctx, "dev", SubmissionAccepted)
	m.Submission(ctx, "dev", SubmissionAccepted)
	m.Submission(ctx, "dev", SubmissionDuplicate)
	m.JobFinished(ctx, "dev", "default", "failed", "timeout")
	m.QueueWait(ctx, "default", 3*time.Millisecond)
	m.RunDuration(ctx, "default", "timeout", 30*time.Second)
	m.PoolHit(ctx)
	m.PoolColdStart(ctx)
	reg, err := m.RegisterPoolSize(func() int64 { return 3 })
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()
	m.HealAttempt(ctx, "install", "fixed")
	m.HealEvent(ctx, "memo_hit", 1)
	m.HealEvent(ctx, "memo_hit", 1)
	m.HealEvent(ctx, "llm_tokens", 150)
	m.LeaseWait(ctx, 250*time.Millisecond, true)
	m.LeaseLost(ctx)
	m.ContainersReaped(ctx, 2)
	m.RunRescued(ctx)
	m.RunRescued(ctx)
	m.FailoverSeen(ctx, "redis", "master")
	m.FailoverSeen(ctx, "nats", "stream_leader")
	m.FailoverSeen(ctx, "nats", "stream_leader")
	reconnects := uint64(4)
	rreg, err := m.RegisterReconnects(func() uint64 { return reconnects })
	require.NoError(t, err)
	defer func() { require.NoError(t, rreg.Unregister()) }()

	body := scrape(t, p)
	assertSeries(t, body, "paddock_submissions_total", `paddock_submission_outcome="accepted"`, "} 2")
	assertSeries(t, body, "paddock_submissions_total", `paddock_submission_outcome="duplicate"`, "} 1")
	assertSeries(t, body, "paddock_jobs_finished_total",
		`paddock_tenant="dev"`, `paddock_queue="default"`, `paddock_job_state="failed"`, `paddock_job_reason="timeout"`, "} 1")
	assertSeries(t, body, "paddock_job_wait_duration_seconds_bucket", `paddock_queue="default"`, `le="0.005"`, "} 1")
	assertSeries(t, body, "paddock_job_wait_duration_seconds_bucket", `le="0.0025"`, "} 0")
	assertSeries(t, body, "paddock_job_run_duration_seconds_bucket", `paddock_job_reason="timeout"`, `le="30"`, "} 1")
	assertSeries(t, body, "paddock_job_run_duration_seconds_bucket", `le="300"`)
	assertSeries(t, body, "paddock_pool_size", "} 3")
	assertSeries(t, body, "paddock_pool_hits_total", "} 1")
	assertSeries(t, body, "paddock_pool_cold_starts_total", "} 1")
	assertSeries(t, body, "paddock_heal_attempts_total", `paddock_heal_action="install"`, `paddock_heal_outcome="fixed"`, "} 1")
	assertSeries(t, body, "paddock_heal_events_total", `paddock_heal_event="memo_hit"`, "} 2")
	assertSeries(t, body, "paddock_heal_llm_tokens_total", "} 150")
	assert.NotContains(t, body, `paddock_heal_event="llm_tokens"`, "tokens are their own counter, not an event")
	assertSeries(t, body, "paddock_lease_wait_duration_seconds_count", `paddock_lease_acquired="true"`, "} 1")
	assertSeries(t, body, "paddock_lease_lost_total", "} 1")
	assertSeries(t, body, "paddock_containers_reaped_total", "} 2")
	assertSeries(t, body, "paddock_runs_rescued_total", "} 2")
	assertSeries(t, body, "paddock_failovers_seen_total", `paddock_failover_service="redis"`, `paddock_failover_kind="master"`, "} 1")
	assertSeries(t, body, "paddock_failovers_seen_total", `paddock_failover_service="nats"`, `paddock_failover_kind="stream_leader"`, "} 2")
	assertSeries(t, body, "paddock_nats_reconnects_total", "} 4")
	reconnects = 5 // an observable counter is read at each scrape
	assertSeries(t, scrape(t, p), "paddock_nats_reconnects_total", "} 5")
	assertSeries(t, body, "target_info", `service_name="test"`)
	assertSeries(t, body, "go_goroutines")
}

func TestMetricsNil(t *testing.T) {
	t.Parallel()
	var m *Metrics
	ctx := context.Background()
	assert.NotPanics(t, func() {
		m.JobFinished(ctx, "dev", "q", "succeeded", "ok")
		m.QueueWait(ctx, "q", time.Second)
		m.RunDuration(ctx, "q", "ok", time.Second)
		m.PoolHit(ctx)
		m.PoolColdStart(ctx)
		m.HealAttempt(ctx, "a", "b")
		m.LeaseWait(ctx, time.Second, false)
		m.LeaseLost(ctx)
		m.ContainersReaped(ctx, 1)
		m.Submission(ctx, "dev", SubmissionRejected)
		m.RunRescued(ctx)
		m.FailoverSeen(ctx, "redis", "master")
	})
	_, err := m.RegisterPoolSize(func() int64 { return 0 })
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_, err = m.RegisterReconnects(func() uint64 { return 0 })
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

// flakyInspector wraps the real inspector and fails GetQueueInfo for one queue.
type flakyInspector struct {
	QueueInspector
	fail string
}

func (f flakyInspector) GetQueueInfo(q string) (*asynq.QueueInfo, error) {
	if q == f.fail {
		return nil, errors.New("injected")
	}
	return f.QueueInspector.GetQueueInfo(q)
}

func TestQueueGauges(t *testing.T) {
	redis := testsvc.StartRedis(t)
	opt := asynq.RedisClientOpt{Network: redis.Network, Addr: redis.Addr}
	client := asynq.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	inspector := asynq.NewInspector(opt)
	t.Cleanup(func() { inspector.Close() })

	for range 3 {
		_, err := client.Enqueue(asynq.NewTask("t", nil), asynq.Queue("busy"))
		require.NoError(t, err)
	}
	_, err := client.Enqueue(asynq.NewTask("t", nil), asynq.Queue("busy"), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)
	_, err = client.Enqueue(asynq.NewTask("t", nil), asynq.Queue("broken"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the oldest pending task ages
		info, err := inspector.GetQueueInfo("busy")
		return err == nil && info.Latency > 0
	}, 30*time.Second, 5*time.Millisecond)

	handled := make(chan error, 10)
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { handled <- err }))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })

	p := newQuietProvider(t)
	reg, err := RegisterQueueGauges(p.MeterProvider().Meter("test"), flakyInspector{inspector, "broken"})
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()

	body := scrape(t, p)
	assertSeries(t, body, "paddock_queue_size", `paddock_queue="busy"`, "} 4")
	assertSeries(t, body, "paddock_queue_pending", `paddock_queue="busy"`, "} 3")
	assertSeries(t, body, "paddock_queue_active", `paddock_queue="busy"`, "} 0")
	assertSeries(t, body, "paddock_queue_latency_seconds", `paddock_queue="busy"`)
	assert.Greater(t, seriesValue(t, body, "paddock_queue_latency_seconds", `paddock_queue="busy"`), 0.0)
	assert.NotContains(t, body, `paddock_queue="broken"`)
	select {
	case err := <-handled:
		assert.ErrorContains(t, err, `asynq queue "broken": injected`)
	default:
		t.Error("the failing queue's error did not reach the otel error handler")
	}
}
