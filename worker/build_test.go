package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

// The heartbeat TTL must outlast the sandbox watchdog by
// worker.WatchdogMargin: the one check of it, in New (Build calls New).
func TestHeartbeatTTLOutlastsTheWatchdog(t *testing.T) {
	d := testsvc.Docker(t)
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	for _, tc := range []struct {
		name          string
		ttl, watchdog time.Duration
		ok            bool
	}{
		{"defaults", 0, 0, true},
		{"exactly the margin", 8 * time.Second, 6 * time.Second, true},
		{"below the margin", 8 * time.Second, 7 * time.Second, false},
		{"default TTL, long watchdog", 0, 10 * time.Second, false},
		{"long TTL, long watchdog", 13 * time.Second, 10 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := worker.Config{ID: testsvc.Unique("ttl"), Caps: job.Caps{Images: []string{testsvc.TestImage}},
				HeartbeatTTL: tc.ttl, Sandbox: sandbox.Config{InitPath: initPath, Watchdog: tc.watchdog}}
			_, err := worker.Build(context.Background(), rdb, d, nil, nil, cfg)
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, worker.ErrHeartbeatTTL)
			assert.ErrorIs(t, err, worker.ErrConfig)
		})
	}
	// The no-op executor has no boxes, hence no watchdog to outlast.
	_, err := worker.Build(context.Background(), rdb, nil, nil, nil, worker.Config{ID: testsvc.Unique("ttl"),
		Caps: job.Caps{Images: []string{testsvc.TestImage}}, NoopExecutor: true, Sandbox: sandbox.Config{Watchdog: time.Hour}})
	assert.NoError(t, err)
}

// logBuffer is a slog handler's writer that tests may read while the
// worker logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A worker Build makes with Wakeups takes a job on the scheduler's wake-up
// on NATS: its backstop poll (TaskCheckInterval) is an hour, so without
// the subscription the second job, submitted while the worker idles, would
// wait that long.
func TestBuildSubscribesToWakeups(t *testing.T) {
	ns := testsvc.StartNATS(t)
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	store := results.NewStore(rdb, js, results.StoreConfig{})
	caps := job.Caps{Images: []string{testsvc.TestImage}}
	sch, err := scheduler.New(js, asynq.NewClientFromRedisClient(rdb), store, scheduler.Config{Caps: caps})
	require.NoError(t, err)
	require.NoError(t, sch.Start(ctx))
	t.Cleanup(sch.Stop)

	var logs logBuffer
	w, err := worker.Build(ctx, rdb, nil, js, store, worker.Config{ID: testsvc.Unique("wake"), Caps: caps, NoopExecutor: true,
		Wakeups: true, TaskCheckInterval: time.Hour, ShutdownTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	c, err := pclient.New(nc, pclient.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := range 2 {
		sub, err := c.Submit(wctx, job.Spec{Command: "true"})
		require.NoError(t, err)
		r, err := c.Wait(wctx, sub.ID)
		require.NoError(t, err, "job %d: no wake-up reached the worker", i)
		assert.Equal(t, job.StateSucceeded, r.State)
	}
	assert.NotContains(t, logs.String(), "no wake-ups")
}

// A NATS user that may not subscribe to the wake-ups (credentials issued
// before they existed) still gets a worker: it polls instead, and says so.
func TestBuildWithoutWakeupPermission(t *testing.T) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "w", Password: "p", Permissions: &server.Permissions{
			Subscribe: &server.SubjectPermission{Deny: []string{job.SubjectWakePrefix + ">"}}}}}}
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("w", "p"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })

	var logs logBuffer
	w, err := worker.Build(context.Background(), rdb, nil, js, nil, worker.Config{ID: testsvc.Unique("nowake"),
		Caps: job.Caps{Images: []string{testsvc.TestImage}}, NoopExecutor: true, Wakeups: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.NotNil(t, w)
	assert.Contains(t, logs.String(), "no wake-ups")
	assert.Contains(t, logs.String(), "Permissions Violation")
}
