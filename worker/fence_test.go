package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/worker"
)

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
