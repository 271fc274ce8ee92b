package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/asynqx"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/worker"
)

// TestRescueWakesIdleWorkers: the rescuer's enqueue wakes idle workers on
// NATS as the scheduler's does. A dead worker (an asynq server that took
// the task and never beats Paddock's heartbeat) holds a job in queue
// "default"; worker A, which takes only "other", rescues it; worker B,
// idle on "default" with an hour-long backstop poll and an hour between
// its own rescue passes, runs the rescue within seconds only because A's
// wake-up reached it.
func TestRescueWakesIdleWorkers(t *testing.T) {
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
	caps := job.Caps{Images: []string{testsvc.TestImage}, Queues: []string{"default", "other"}}

	id := testsvc.Unique("woken")
	key := job.Key("", id)
	payload, err := json.Marshal(job.Spec{ID: id, Command: "true", Queue: "default"})
	require.NoError(t, err)
	started, release := make(chan struct{}), make(chan struct{})
	dead := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 1, Queues: map[string]int{"default": 1},
		LogLevel: asynq.FatalLevel, ShutdownTimeout: time.Second})
	mux := asynq.NewServeMux()
	mux.HandleFunc(job.TaskType, func(ctx context.Context, _ *asynq.Task) error {
		_, err := store.BeginRunAs(ctx, key, results.RunOwner{Worker: testsvc.Unique("dead"), TaskID: key, Queue: "default"})
		assert.NoError(t, err)
		close(started)
		<-release
		return nil
	})
	require.NoError(t, dead.Start(mux))
	t.Cleanup(func() { close(release); dead.Shutdown() })
	_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask(job.TaskType, payload), asynq.TaskID(key),
		asynq.Queue("default"), asynq.MaxRetry(3), asynq.Retention(time.Hour))
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the dead worker's server did not take the task")
	}

	build := func(name string, queues map[string]int, rescue time.Duration) {
		w, err := worker.Build(ctx, rdb, nil, js, store, worker.Config{ID: testsvc.Unique(name), Caps: caps, NoopExecutor: true,
			Queues: queues, Wakeups: true, TaskCheckInterval: time.Hour, RescueInterval: rescue, ShutdownTimeout: 5 * time.Second})
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(w.Stop)
	}
	build("b", map[string]int{"default": 1}, time.Hour) // idle on the job's queue before the rescue exists
	build("a", map[string]int{"other": 1}, 100*time.Millisecond)

	c, err := pclient.New(nc, pclient.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := c.Wait(wctx, id)
	require.NoError(t, err, "the rescue waited for the backstop poll: no wake-up reached the idle worker")
	assert.Equal(t, job.StateSucceeded, r.State)
	assert.Equal(t, 2, r.Runs, "run by its rescue")
	task, err := store.TaskOf(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, asynqx.RescueID(key, 1), task)
}
