package asynqx_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// These tests pin what the rescuer (rescue.go) relies on in asynq v0.26,
// against a real asynq server on a real Redis. When an upgrade makes one
// fail, read rescue.go's doc again before touching the pin
// (TestWrittenAgainstAsynqV0260).

// blockingServer starts an asynq server over rdb whose handler reports each
// task id it starts on started and then blocks until release is closed.
func blockingServer(t *testing.T, rdb redis.UniversalClient, queue string, started chan<- string, release <-chan struct{}) *asynq.Server {
	t.Helper()
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: 1, Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel,
		ShutdownTimeout: time.Second,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("t", func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		started <- id
		<-release
		return nil
	})
	require.NoError(t, srv.Start(mux))
	return srv
}

// TestAsynqLeasesAnActiveTask: a task being handled is in the queue's
// active list and in its lease set (scored by the lease's expiry, well
// ahead: asynq's own recovery waits for it), its hash keeps what a rescue
// copies (payload, headers, tries, timeout, retention) and says "active",
// and asynq refuses a second task with the same id while it is kept.
func TestAsynqLeasesAnActiveTask(t *testing.T) {
	rs := testsvc.StartRedis(t)
	rdb, probe := rs.Client(), rs.Client()
	t.Cleanup(func() { rdb.Close(); probe.Close() })
	ctx := context.Background()
	queue, id := testsvc.Unique("q"), "dev/"+testsvc.Unique("j")
	started, release := make(chan string, 1), make(chan struct{})
	srv := blockingServer(t, rdb, queue, started, release)
	t.Cleanup(func() { close(release); srv.Shutdown() })
	cl := asynq.NewClientFromRedisClient(probe)
	_, err := cl.Enqueue(asynq.NewTaskWithHeaders("t", []byte("spec"), map[string]string{"h": "v"}),
		asynq.TaskID(id), asynq.Queue(queue), asynq.MaxRetry(3), asynq.Timeout(time.Hour), asynq.Retention(time.Hour))
	require.NoError(t, err)
	select {
	case got := <-started:
		require.Equal(t, id, got, "the handler's task id is the id enqueued")
	case <-time.After(20 * time.Second):
		t.Fatal("the task was not handled")
	}

	prefix := "asynq:{" + queue + "}:"
	assert.Equal(t, "list", probe.Type(ctx, prefix+"active").Val())
	assert.Equal(t, []string{id}, probe.LRange(ctx, prefix+"active", 0, -1).Val())
	assert.Equal(t, "zset", probe.Type(ctx, prefix+"lease").Val())
	lease, err := probe.ZScore(ctx, prefix+"lease", id).Result()
	require.NoError(t, err, "the active task has no lease")
	ahead := time.Until(time.Unix(int64(lease), 0))
	assert.Greater(t, ahead, 10*time.Second, "asynq's lease got short: its own recovery may now be quick enough to retire the rescuer")
	assert.Equal(t, "hash", probe.Type(ctx, prefix+"t:"+id).Val())
	assert.Equal(t, "active", probe.HGet(ctx, prefix+"t:"+id, "state").Val())

	info, err := asynq.NewInspectorFromRedisClient(probe).GetTaskInfo(queue, id)
	require.NoError(t, err)
	assert.Equal(t, asynq.TaskStateActive, info.State)
	assert.Equal(t, []byte("spec"), info.Payload)
	assert.Equal(t, "v", info.Headers["h"])
	assert.Equal(t, 3, info.MaxRetry)
	assert.Equal(t, time.Hour, info.Timeout)
	assert.Equal(t, time.Hour, info.Retention)

	_, err = cl.Enqueue(asynq.NewTask("t", nil), asynq.TaskID(id), asynq.Queue(queue))
	assert.ErrorIs(t, err, asynq.ErrTaskIDConflict, "a second task with an active task's id")
}

// cutOff fails every command of a real client while on is set: a worker
// that died (it renews no lease, writes nothing).
type cutOff struct{ on atomic.Bool }

var errCutOff = errors.New("injected: the worker is gone")

func (c *cutOff) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cutOff) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.on.Load() {
			return errCutOff
		}
		return next(ctx, cmd)
	}
}
func (c *cutOff) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.on.Load() {
			return errCutOff
		}
		return next(ctx, cmds)
	}
}

// TestAsynqRecoversAnExpiredLease: the task of a worker gone silent stays
// active until its lease has expired; then another server's recoverer
// (which passes when the server starts, then every minute) moves it to the
// retry set, one try used: the original task that the rescuer's
// results.ErrStaleTask check later meets. The lease is moved back instead
// of waited for.
func TestAsynqRecoversAnExpiredLease(t *testing.T) {
	rs := testsvc.StartRedis(t)
	rdb, probe := rs.Client(), rs.Client()
	t.Cleanup(func() { rdb.Close(); probe.Close() })
	cut := &cutOff{}
	rdb.AddHook(cut)
	ctx := context.Background()
	queue, id := testsvc.Unique("q"), "dev/"+testsvc.Unique("j")
	started, release := make(chan string, 1), make(chan struct{})
	dead := blockingServer(t, rdb, queue, started, release)
	t.Cleanup(func() { close(release); dead.Shutdown() })
	_, err := asynq.NewClientFromRedisClient(probe).Enqueue(asynq.NewTask("t", []byte("spec")),
		asynq.TaskID(id), asynq.Queue(queue), asynq.MaxRetry(3))
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the task was not handled")
	}
	cut.on.Store(true) // the worker is gone: nothing renews the lease

	prefix := "asynq:{" + queue + "}:"
	expired := float64(time.Now().Add(-2 * time.Minute).Unix())
	require.Equal(t, int64(0), probe.ZAddXX(ctx, prefix+"lease", redis.Z{Score: expired, Member: id}).Val(),
		"the lease set holds the active task (ZADD XX changes, adds nothing)")
	require.Equal(t, expired, probe.ZScore(ctx, prefix+"lease", id).Val())

	other := asynq.NewServerFromRedisClient(probe, asynq.Config{
		Concurrency: 1, Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel,
	})
	require.NoError(t, other.Start(asynq.NewServeMux()))
	t.Cleanup(other.Shutdown)
	insp := asynq.NewInspectorFromRedisClient(probe)
	var info *asynq.TaskInfo
	require.Eventually(t, func() bool {
		info, err = insp.GetTaskInfo(queue, id)
		return err == nil && info.State == asynq.TaskStateRetry
	}, 20*time.Second, 20*time.Millisecond, "the recoverer did not move the expired task to retry")
	assert.Equal(t, 1, info.Retried, "the recovery used one of the task's tries")
	assert.Contains(t, info.LastErr, "lease expired")
	assert.Empty(t, probe.LRange(ctx, prefix+"active", 0, -1).Val())
	assert.Equal(t, redis.Nil, probe.ZScore(ctx, prefix+"lease", id).Err())
	assert.Equal(t, "zset", probe.Type(ctx, prefix+"retry").Val())
}

// TestAsynqCompletedLayout: a task handled with a retention leaves the
// active list and the lease set for the completed set, scored by its
// expiry (now + retention, Unix seconds), its hash kept with state
// "completed", and its id still taken. The rescuer's retirement of a
// rescued original (rescue_retire.lua) leaves a task just so.
func TestAsynqCompletedLayout(t *testing.T) {
	rs := testsvc.StartRedis(t)
	rdb, probe := rs.Client(), rs.Client()
	t.Cleanup(func() { rdb.Close(); probe.Close() })
	ctx := context.Background()
	queue, id := testsvc.Unique("q"), "dev/"+testsvc.Unique("j")
	started, release := make(chan string, 1), make(chan struct{})
	close(release) // the handler returns at once
	srv := blockingServer(t, rdb, queue, started, release)
	t.Cleanup(srv.Shutdown)
	cl := asynq.NewClientFromRedisClient(probe)
	_, err := cl.Enqueue(asynq.NewTask("t", nil), asynq.TaskID(id), asynq.Queue(queue), asynq.Retention(time.Hour))
	require.NoError(t, err)
	prefix := "asynq:{" + queue + "}:"
	require.Eventually(t, func() bool { return probe.ZScore(ctx, prefix+"completed", id).Err() == nil },
		20*time.Second, 10*time.Millisecond, "the task did not complete")
	score := probe.ZScore(ctx, prefix+"completed", id).Val()
	expiry := time.Unix(int64(score), 0)
	assert.WithinDuration(t, time.Now().Add(time.Hour), expiry, time.Minute, "completed is scored by now + retention")
	assert.Equal(t, "completed", probe.HGet(ctx, prefix+"t:"+id, "state").Val())
	assert.Empty(t, probe.LRange(ctx, prefix+"active", 0, -1).Val())
	assert.Equal(t, redis.Nil, probe.ZScore(ctx, prefix+"lease", id).Err())
	info, err := asynq.NewInspectorFromRedisClient(probe).GetTaskInfo(queue, id)
	require.NoError(t, err)
	assert.Equal(t, asynq.TaskStateCompleted, info.State)
	_, err = cl.Enqueue(asynq.NewTask("t", nil), asynq.TaskID(id), asynq.Queue(queue))
	assert.ErrorIs(t, err, asynq.ErrTaskIDConflict, "asynq let a kept completed task's id be taken again")
}
