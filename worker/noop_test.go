package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

// A job on a no-op worker (bench only: no sandbox runtime at all) goes
// through the real handler path: its run is counted (BeginRun), its result
// recorded and published, and the result says that nothing ran.
func TestNoopExecutorRunsTheHandlerPath(t *testing.T) {
	ns := testsvc.StartNATS(t)
	rs := testsvc.StartRedis(t)
	ctx := context.Background()
	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	store := results.NewStore(rdb, js, results.StoreConfig{})
	caps := job.Caps{Images: []string{testsvc.TestImage}}
	sch, err := scheduler.New(js, asynq.NewClientFromRedisClient(rdb), store, scheduler.Config{Caps: caps})
	require.NoError(t, err)
	require.NoError(t, sch.Start(ctx))
	t.Cleanup(sch.Stop)
	owner := testsvc.Unique("noop")

	_, err = worker.New(rdb, nil, store, worker.Config{ID: owner, Caps: caps})
	require.ErrorIs(t, err, worker.ErrConfig, "a nil runtime is refused without the no-op executor")

	// No Docker client: the no-op executor makes no sandbox runtime.
	w, err := worker.Build(ctx, rdb, nil, js, store, worker.Config{ID: owner, Caps: caps, NoopExecutor: true,
		Concurrency: 4, Intakes: 2, ShutdownTimeout: 5 * time.Second}) // two asynq servers
	require.NoError(t, err)
	for range 2 { // starts and stops again, without a runtime
		require.NoError(t, w.Start(ctx))
		require.NoError(t, w.Start(ctx))
		w.Stop()
	}
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	c, err := pclient.New(nc, pclient.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sub, err := c.Submit(wctx, job.Spec{Command: "echo hi; exit 3"})
	require.NoError(t, err)
	r, err := c.Wait(wctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, job.StateSucceeded, r.State, "the command never ran: exit 0")
	assert.Equal(t, job.ReasonOK, r.Reason)
	require.NotNil(t, r.ExitCode)
	assert.Zero(t, *r.ExitCode)
	assert.Empty(t, r.Stdout.Text)
	assert.Equal(t, 1, r.Runs, "BeginRun counted the run")
	assert.Equal(t, owner, r.Worker)
	require.Len(t, r.Attempts, 1)
	assert.Contains(t, r.Attempts[0].Note, worker.NoopNote)
	assert.Equal(t, "echo hi; exit 3", r.Attempts[0].Command)

	stored, err := store.Get(ctx, job.Key("", sub.ID))
	require.NoError(t, err, "the result is recorded in Redis")
	assert.Equal(t, job.StateSucceeded, stored.State)
	assert.Equal(t, 1, stored.Runs)
}
