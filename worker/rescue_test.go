package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/worker"
)

// rescueSetup is a Redis, a results store on it, and an asynq client.
type rescueSetup struct {
	rdb   *redis.Client
	store *results.Store
	cl    *asynq.Client
	insp  *asynq.Inspector
}

func newRescueSetup(t *testing.T) rescueSetup {
	t.Helper()
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	nc, err := nats.Connect(testsvc.StartNATS(t).URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(context.Background(), js, results.StreamConfig{}))
	cl := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	return rescueSetup{rdb: rdb, store: results.NewStore(rdb, js, results.StoreConfig{}), cl: cl, insp: insp}
}

// TestRescuerRescuesOnlyDeadWorkersRuns: a run noted by a worker whose
// heartbeat key is gone is enqueued again under <key>#rescue-<run>, once
// however many rescuers pass; the original task is then stale (BeginRunAs
// refuses it) while the rescue task runs as run 2. A live worker's run, a
// run started again since, and a run with a result are left alone.
func TestRescuerRescuesOnlyDeadWorkersRuns(t *testing.T) {
	s := newRescueSetup(t)
	ctx := context.Background()
	key := job.Key("", testsvc.Unique("r"))
	_, err := s.cl.Enqueue(asynq.NewTaskWithHeaders(job.TaskType, []byte("payload"), map[string]string{"h": "v"}),
		asynq.TaskID(key), asynq.Queue(job.DefaultQueue), asynq.MaxRetry(3), asynq.Retention(time.Hour))
	require.NoError(t, err)
	live := worker.NewHeartbeat(s.rdb, "live", "paddock:", 8*time.Second)
	require.NoError(t, live.Start(ctx))
	t.Cleanup(live.Stop)

	run, err := s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "live", TaskID: key, Queue: job.DefaultQueue})
	require.NoError(t, err)
	require.Equal(t, 1, run)
	a := worker.NewRescuer(s.rdb, "paddock:", time.Second, slog.New(slog.DiscardHandler))
	b := worker.NewRescuer(s.rdb, "paddock:", time.Second, slog.New(slog.DiscardHandler))
	got, err := a.Pass(ctx)
	require.NoError(t, err)
	assert.Empty(t, got, "a live worker's run was rescued")

	live.Stop() // deletes the heartbeat key: the worker is dead
	var wg sync.WaitGroup
	var ids [2][]string
	for i, r := range []*worker.Rescuer{a, b} {
		wg.Go(func() {
			var perr error
			ids[i], perr = r.Pass(ctx)
			assert.NoError(t, perr)
		})
	}
	wg.Wait()
	all := append(ids[0], ids[1]...)
	require.NotEmpty(t, all)
	for _, id := range all {
		assert.Equal(t, key+"#rescue-1", id)
	}
	info, err := s.insp.GetTaskInfo(job.DefaultQueue, key+"#rescue-1")
	require.NoError(t, err)
	assert.Equal(t, []byte("payload"), info.Payload)
	assert.Equal(t, "v", info.Headers["h"])
	assert.Equal(t, 2, info.MaxRetry, "a rescue uses one of the task's tries")
	got, err = a.Pass(ctx)
	require.NoError(t, err)
	assert.Empty(t, got, "rescued twice")

	_, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "other", TaskID: key, Queue: job.DefaultQueue})
	assert.ErrorIs(t, err, results.ErrStaleTask, "the original task still carries the job")
	run, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w2", TaskID: key + "#rescue-1", Queue: job.DefaultQueue})
	require.NoError(t, err)
	assert.Equal(t, 2, run)

	// w2 never beat: it counts as dead too. Its run 2 is rescued once.
	got, err = a.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{key + "#rescue-2"}, got)

	// A run started again since (run 3 elsewhere) is not rescued.
	_, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w3", TaskID: key + "#rescue-2", Queue: job.DefaultQueue})
	require.NoError(t, err)
	require.NoError(t, s.rdb.HSet(ctx, "paddock:active:w4", key, "2|"+key+"#rescue-2|"+job.DefaultQueue).Err())
	require.NoError(t, s.rdb.SAdd(ctx, "paddock:active", "w4").Err())
	// A run with a result is not rescued either (w3's).
	tenant, id, _ := job.SplitKey(key)
	r := job.Result{ID: id, Tenant: tenant}
	r.Finish(job.ReasonOK)
	_, _, err = s.store.Record(ctx, r)
	require.NoError(t, err)
	got, err = a.Pass(ctx)
	require.NoError(t, err)
	assert.Empty(t, got)
	n, err := s.rdb.Exists(ctx, "paddock:active:w3", "paddock:active:w4").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "settled entries stay in the active sets")
}

// TestRescuerStartStop: the rescuer is a restartable service.
func TestRescuerStartStop(t *testing.T) {
	s := newRescueSetup(t)
	var passes atomic.Int32
	r := worker.NewRescuer(s.rdb, "paddock:", 10*time.Millisecond, slog.New(slog.DiscardHandler))
	r.OnRescue = func(string) { passes.Add(1) }
	for range 3 {
		require.NoError(t, r.Start(context.Background()))
		require.NoError(t, r.Start(context.Background()))
		time.Sleep(30 * time.Millisecond)
		r.Stop()
		r.Stop()
	}
	assert.Zero(t, passes.Load())
}

// failingRedis makes every command of a real client fail while on is set
// (a worker cut off from Redis).
type failingRedis struct{ on atomic.Bool }

func (f *failingRedis) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failingRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.on.Load() {
			return errors.New("injected: redis unreachable")
		}
		return next(ctx, cmd)
	}
}
func (f *failingRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f.on.Load() {
			return errors.New("injected: redis unreachable")
		}
		return next(ctx, cmds)
	}
}

// TestHeartbeatFencesBeforeItsKeyExpires: a worker cut off from Redis
// fences itself (OnFence, a new epoch, Fenced) while its heartbeat key
// still exists, so no rescuer can have judged it dead yet; once a beat
// succeeds again it is no longer fenced, but the epoch stays moved on.
func TestHeartbeatFencesBeforeItsKeyExpires(t *testing.T) {
	rs := testsvc.StartRedis(t)
	rdb, probe := rs.Client(), rs.Client()
	t.Cleanup(func() { rdb.Close(); probe.Close() })
	fail := &failingRedis{}
	rdb.AddHook(fail)
	ctx := context.Background()
	hb := worker.NewHeartbeatEvery(rdb, "cut", "paddock:", 3*time.Second, 100*time.Millisecond)
	var keyAtFence atomic.Int64
	var fences atomic.Int32
	hb.OnFence = func() {
		keyAtFence.Store(probe.Exists(ctx, "paddock:worker:cut").Val())
		fences.Add(1)
	}
	require.NoError(t, hb.Start(ctx))
	t.Cleanup(hb.Stop)
	e0, fenced := hb.Epoch()
	require.False(t, fenced)

	fail.on.Store(true)
	require.Eventually(t, func() bool { return fences.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, int64(1), keyAtFence.Load(), "fenced only after the key could have expired")
	e1, fenced := hb.Epoch()
	assert.True(t, fenced)
	assert.Equal(t, e0+1, e1)

	fail.on.Store(false)
	require.Eventually(t, func() bool { _, f := hb.Epoch(); return !f }, 10*time.Second, 10*time.Millisecond)
	e2, _ := hb.Epoch()
	assert.Equal(t, e1, e2, "a job of the fenced epoch may never record")
	assert.Equal(t, int32(1), fences.Load())
}
