package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/asynqx"
	"github.com/paddockhq/paddock/internal/failwatch"
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
	n, err := rdb.Get(ctx, "paddock:"+failwatch.RescuedKey).Int()
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the fleet view counts the rescue once (the worker's OnRescue)")
}

// rescuedAtRecord is a real results store whose first RecordRun is
// preceded by what a freeze past the heartbeat's TTL allows after the
// worker's own fence check: its heartbeat key expires (deleted here) and a
// rescuer moves the job to its rescue task.
type rescuedAtRecord struct {
	*results.Store
	t       *testing.T
	rdb     redis.UniversalClient
	worker  string
	once    sync.Once
	staleMu sync.Mutex
	stale   []error
}

func (s *rescuedAtRecord) RecordRun(ctx context.Context, r job.Result, tok results.RunToken) (job.Result, bool, error) {
	s.once.Do(func() {
		rescuer := asynqx.NewRescuer(s.rdb, asynqx.RescuerConfig{Logger: slog.New(slog.DiscardHandler)})
		for range 20 { // the worker renews its key every second: delete it and pass until the pass sees it gone
			s.rdb.Del(ctx, "paddock:worker:"+s.worker)
			if ids, err := rescuer.Pass(ctx); err == nil && len(ids) == 1 {
				return
			}
		}
		s.t.Error("the rescuer never took the run for dead")
	})
	stored, first, err := s.Store.RecordRun(ctx, r, tok)
	if errors.Is(err, results.ErrStaleRun) {
		s.staleMu.Lock()
		s.stale = append(s.stale, err)
		s.staleMu.Unlock()
	}
	return stored, first, err
}

// TestRescuedRunRecordsNothing: a run rescued between the worker's fence
// check and its record (the residual window this closes) records nothing;
// its task completes (no retry, no archive), and the rescue task, run by
// a worker, records the job's one result as run 2.
func TestRescuedRunRecordsNothing(t *testing.T) {
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
	id, owner := testsvc.Unique("stale"), testsvc.Unique("frozen")
	store := &rescuedAtRecord{Store: results.NewStore(rdb, js, results.StoreConfig{}), t: t, rdb: rdb, worker: owner}
	caps := job.Caps{Images: []string{testsvc.TestImage}}
	w, err := worker.Build(ctx, rdb, nil, js, store, worker.Config{ID: owner, Caps: caps, NoopExecutor: true,
		RescueInterval: time.Hour, ShutdownTimeout: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)

	key := job.Key("", id)
	payload, err := json.Marshal(job.Spec{ID: id, Command: "true"})
	require.NoError(t, err)
	_, err = asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask(job.TaskType, payload), asynq.TaskID(key),
		asynq.MaxRetry(3), asynq.Retention(time.Hour))
	require.NoError(t, err)
	c, err := pclient.New(nc, pclient.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := c.Wait(wctx, id)
	require.NoError(t, err)
	assert.Equal(t, 2, r.Runs, "the stale run 1 recorded")
	store.staleMu.Lock()
	assert.Len(t, store.stale, 1, "run 1 was not refused as stale")
	store.staleMu.Unlock()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	require.Eventually(t, func() bool {
		info, err := insp.GetTaskInfo(job.DefaultQueue, key)
		return err == nil && info.State == asynq.TaskStateCompleted
	}, 10*time.Second, 20*time.Millisecond, "the stale run's task did not complete")
}
