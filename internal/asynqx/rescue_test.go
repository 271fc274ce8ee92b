package asynqx_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/paddockhq/paddock/internal/asynqx"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var quiet = slog.New(slog.DiscardHandler)

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
	// worker.Heartbeat's key: while it exists, the worker is alive.
	require.NoError(t, s.rdb.Set(ctx, "paddock:worker:live", "1", time.Minute).Err())

	run, err := s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "live", TaskID: key, Queue: job.DefaultQueue})
	require.NoError(t, err)
	require.Equal(t, 1, run)
	a := asynqx.NewRescuer(s.rdb, asynqx.RescuerConfig{Interval: time.Second, Logger: quiet})
	b := asynqx.NewRescuer(s.rdb, asynqx.RescuerConfig{Interval: time.Second, Logger: quiet})
	got, err := a.Pass(ctx)
	require.NoError(t, err)
	assert.Empty(t, got, "a live worker's run was rescued")

	require.NoError(t, s.rdb.Del(ctx, "paddock:worker:live").Err()) // the worker is dead
	var wg sync.WaitGroup
	var ids [2][]string
	for i, r := range []*asynqx.Rescuer{a, b} {
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
		assert.Equal(t, asynqx.RescueID(key, 1), id)
	}
	info, err := s.insp.GetTaskInfo(job.DefaultQueue, asynqx.RescueID(key, 1))
	require.NoError(t, err)
	assert.Equal(t, []byte("payload"), info.Payload)
	assert.Equal(t, "v", info.Headers["h"])
	assert.Equal(t, 2, info.MaxRetry, "a rescue uses one of the task's tries")
	got, err = a.Pass(ctx)
	require.NoError(t, err)
	assert.Empty(t, got, "rescued twice")

	_, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "other", TaskID: key, Queue: job.DefaultQueue})
	assert.ErrorIs(t, err, results.ErrStaleTask, "the original task still carries the job")
	run, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w2", TaskID: asynqx.RescueID(key, 1), Queue: job.DefaultQueue})
	require.NoError(t, err)
	assert.Equal(t, 2, run)

	// w2 never beat: it counts as dead too. Its run 2 is rescued once.
	got, err = a.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{asynqx.RescueID(key, 2)}, got)

	// A run started again since (run 3 elsewhere) is not rescued.
	_, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w3", TaskID: asynqx.RescueID(key, 2), Queue: job.DefaultQueue})
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

// TestRescuerStartStop: the rescuer is a restartable service: started
// twice and stopped twice, three times over, each time it rescues the run
// of a worker that died meanwhile (a positive witness that its loop runs),
// once.
func TestRescuerStartStop(t *testing.T) {
	s := newRescueSetup(t)
	ctx := context.Background()
	rescued := make(chan string, 10)
	r := asynqx.NewRescuer(s.rdb, asynqx.RescuerConfig{Interval: 10 * time.Millisecond, Logger: quiet,
		OnRescue: func(id string) { rescued <- id }})
	deadRun := func() string {
		key := job.Key("", testsvc.Unique("ss"))
		_, err := s.cl.Enqueue(asynq.NewTask(job.TaskType, nil), asynq.TaskID(key), asynq.Queue(job.DefaultQueue), asynq.MaxRetry(3))
		require.NoError(t, err)
		_, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: testsvc.Unique("dead"), TaskID: key, Queue: job.DefaultQueue})
		require.NoError(t, err)
		return key
	}
	for range 3 {
		require.NoError(t, r.Start(ctx))
		require.NoError(t, r.Start(ctx))
		key := deadRun()
		select {
		case id := <-rescued:
			assert.Equal(t, asynqx.RescueID(key, 1), id)
		case <-time.After(10 * time.Second):
			t.Fatal("a started rescuer did not rescue a dead worker's run")
		}
		r.Stop()
		r.Stop()
	}
	assert.Empty(t, rescued, "a run was rescued twice")
}

// With a Grace, the pass that first finds a worker dead rescues nothing;
// a pass once the grace has passed does. A worker that comes back in
// between starts a new grace when it dies again.
func TestRescueWaitsTheGrace(t *testing.T) {
	s := newRescueSetup(t)
	ctx := context.Background()
	key := job.Key(job.DefaultTenant, testsvc.Unique("grace"))
	_, err := s.cl.Enqueue(asynq.NewTask(job.TaskType, []byte("spec")),
		asynq.TaskID(key), asynq.Queue(job.DefaultQueue), asynq.MaxRetry(3))
	require.NoError(t, err)
	w := testsvc.Unique("cut")
	run, err := s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: w, TaskID: key, Queue: job.DefaultQueue})
	require.NoError(t, err)
	const grace = 300 * time.Millisecond
	r := asynqx.NewRescuer(s.rdb, asynqx.RescuerConfig{Logger: quiet, Grace: grace})
	pass := func() []string {
		got, err := r.Pass(ctx)
		require.NoError(t, err)
		return got
	}
	require.Empty(t, pass(), "rescued at the first sight of a dead worker")
	// The worker beats again (its key is back) and dies again: a new grace.
	// sleep: the grace is the time under test.
	time.Sleep(grace)
	require.NoError(t, s.rdb.Set(ctx, "paddock:worker:"+w, "{}", time.Minute).Err())
	require.Empty(t, pass(), "a live worker's run was rescued")
	require.NoError(t, s.rdb.Del(ctx, "paddock:worker:"+w).Err())
	require.Empty(t, pass(), "the grace did not start again when the worker came back")
	time.Sleep(grace)
	require.Equal(t, []string{asynqx.RescueID(key, run)}, pass(), "not rescued once the grace had passed")
}

// TestRescuedRunCannotRecord closes the residual window: a worker frozen
// past its heartbeat's TTL after its own fence check still holds run 1's
// token when it resumes. Once the rescuer moved the job to
// <key>#rescue-1, that run's RecordRun is refused (results.ErrStaleRun:
// nothing stored, nothing published) even though no result exists yet, and
// the rescue's run records. Without the check in results/recordrun.lua the
// stale writer would be first and the rescue's result lost.
func TestRescuedRunCannotRecord(t *testing.T) {
	s := newRescueSetup(t)
	ctx := context.Background()
	tenant, id := job.DefaultTenant, testsvc.Unique("stale")
	key := job.Key(tenant, id)
	_, err := s.cl.Enqueue(asynq.NewTask(job.TaskType, []byte("spec")),
		asynq.TaskID(key), asynq.Queue(job.DefaultQueue), asynq.MaxRetry(3))
	require.NoError(t, err)
	frozen := testsvc.Unique("frozen") // never beats: dead to the rescuer
	run, err := s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: frozen, TaskID: key, Queue: job.DefaultQueue})
	require.NoError(t, err)
	got, err := asynqx.NewRescuer(s.rdb, asynqx.RescuerConfig{Logger: quiet}).Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{asynqx.RescueID(key, run)}, got)

	result := func(worker string) job.Result {
		r := job.Result{ID: id, Tenant: tenant, Worker: worker}
		r.Finish(job.ReasonOK)
		return r
	}
	_, _, err = s.store.RecordRun(ctx, result(frozen), results.RunToken{Run: run, TaskID: key})
	require.ErrorIs(t, err, results.ErrStaleRun, "the rescued run recorded")
	_, err = s.store.Get(ctx, key)
	require.ErrorIs(t, err, results.ErrNotFound, "the stale run stored a result")

	rescue := asynqx.RescueID(key, run)
	run2, err := s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w2", TaskID: rescue, Queue: job.DefaultQueue})
	require.NoError(t, err)
	stored, first, err := s.store.RecordRun(ctx, result("w2"), results.RunToken{Run: run2, TaskID: rescue})
	require.NoError(t, err)
	assert.True(t, first)
	assert.Equal(t, "w2", stored.Worker)

	// After the rescue recorded, the stale run is told the stored result,
	// like any later writer, and changes nothing.
	stored, first, err = s.store.RecordRun(ctx, result(frozen), results.RunToken{Run: run, TaskID: key})
	require.NoError(t, err)
	assert.False(t, first)
	assert.Equal(t, "w2", stored.Worker, "the rescue's result wins")
}

// TestRescuerRetiresTheOriginalOnceItsLeaseExpired: a dead worker's task
// stays in asynq's active list and lease set after its rescue is enqueued
// (the dashboard, asynqmon and KEDA count it) until asynq's recoverer, a
// minute or two later. The rescuer takes it out itself, but only once its
// lease expired (RetireMargin past it): before that a pass leaves it. The
// retired task ends completed, as asynq leaves a completed one (no lease
// left for asynq's recoverer to see); the rescue task is untouched and the
// rescue's enqueue woke its queue.
func TestRescuerRetiresTheOriginalOnceItsLeaseExpired(t *testing.T) {
	s := newRescueSetup(t)
	ctx := context.Background()
	queue := testsvc.Unique("q")
	key := job.Key("", testsvc.Unique("ret"))
	dead, cut := s.rdb.Options(), &cutOff{}
	deadRdb := redis.NewClient(dead)
	t.Cleanup(func() { deadRdb.Close() })
	deadRdb.AddHook(cut)
	started, release := make(chan string, 1), make(chan struct{})
	srv := asynq.NewServerFromRedisClient(deadRdb, asynq.Config{Concurrency: 1, Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel, ShutdownTimeout: time.Second})
	mux := asynq.NewServeMux()
	mux.HandleFunc(job.TaskType, func(ctx context.Context, _ *asynq.Task) error {
		started <- key
		<-release
		return nil
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(func() { close(release); srv.Shutdown() })
	_, err := s.cl.Enqueue(asynq.NewTask(job.TaskType, []byte("spec")), asynq.TaskID(key), asynq.Queue(queue),
		asynq.MaxRetry(3), asynq.Retention(time.Hour))
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the task was not handled")
	}
	_, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: testsvc.Unique("dead"), TaskID: key, Queue: queue})
	require.NoError(t, err)
	cut.on.Store(true) // the worker is gone: nothing renews its lease

	var woken []string
	var retired []string
	r := asynqx.NewRescuer(s.rdb, asynqx.RescuerConfig{Logger: quiet,
		Wake: func(q string) { woken = append(woken, q) }, OnRetire: func(id string) { retired = append(retired, id) }})
	got, err := r.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{asynqx.RescueID(key, 1)}, got)
	assert.Equal(t, []string{queue}, woken, "the rescue's enqueue woke no worker")
	prefix := "asynq:{" + queue + "}:"
	_, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Empty(t, retired, "retired while its lease was valid")
	assert.Equal(t, []string{key}, s.rdb.LRange(ctx, prefix+"active", 0, -1).Val())

	// The lease runs out (moved back instead of waited for: 30 s).
	lease := s.rdb.ZScore(ctx, prefix+"lease", key).Val()
	require.NotZero(t, lease)
	almost := float64(time.Now().Add(-asynqx.RetireMargin + 2*time.Second).Unix())
	require.NoError(t, s.rdb.ZAddXX(ctx, prefix+"lease", redis.Z{Score: almost, Member: key}).Err())
	_, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Empty(t, retired, "retired within RetireMargin of its lease's expiry")
	expired := float64(time.Now().Add(-asynqx.RetireMargin - 2*time.Second).Unix())
	require.NoError(t, s.rdb.ZAddXX(ctx, prefix+"lease", redis.Z{Score: expired, Member: key}).Err())
	_, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{key}, retired)
	assert.Empty(t, s.rdb.LRange(ctx, prefix+"active", 0, -1).Val(), "still in asynq's active list")
	assert.Equal(t, redis.Nil, s.rdb.ZScore(ctx, prefix+"lease", key).Err(), "still in asynq's lease set")
	info, err := s.insp.GetTaskInfo(queue, key)
	require.NoError(t, err)
	assert.Equal(t, asynq.TaskStateCompleted, info.State)
	qi, err := s.insp.GetQueueInfo(queue)
	require.NoError(t, err)
	assert.Zero(t, qi.Active, "the inspector counts it active")
	assert.Equal(t, 1, qi.Pending, "the rescue task")
	assert.Equal(t, 1, qi.Completed)

	_, err = r.Pass(ctx)
	require.NoError(t, err)
	assert.Len(t, retired, 1, "retired twice")
	assert.Zero(t, s.rdb.SCard(ctx, "paddock:retire").Val(), "the retirement is still noted")
}
