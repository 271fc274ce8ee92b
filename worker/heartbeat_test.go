package worker_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/worker"
)

// TestHeartbeatAliveOnlyJudgesKnownWorkers: a worker that beat here and
// stopped is dead (its containers are reapable); an owner this Redis never
// heard of belongs to another fleet on the same engine and counts as alive.
func TestHeartbeatAliveOnlyJudgesKnownWorkers(t *testing.T) {
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	a := worker.NewHeartbeat(rdb, "a", "paddock:", 3*time.Second)
	b := worker.NewHeartbeat(rdb, "b", "paddock:", 3*time.Second)
	for range 3 { // restartable
		require.NoError(t, a.Start(ctx))
		require.NoError(t, a.Start(ctx))
		alive, err := b.Alive(ctx, "a")
		require.NoError(t, err)
		assert.True(t, alive)
		a.Stop()
		a.Stop()
	}
	alive, err := b.Alive(ctx, "a")
	require.NoError(t, err)
	assert.False(t, alive, "a known worker without a heartbeat is dead")
	alive, err = b.Alive(ctx, "stranger")
	require.NoError(t, err)
	assert.True(t, alive, "an owner of another fleet is not ours to judge")
}

// Every beat writes the worker's facts as its key's value (job.WorkerBeat):
// what Status fills, and the id, host, pid and times the beat sets; the
// fleet view parses it back.
func TestHeartbeatRecordsTheWorkersFacts(t *testing.T) {
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	hb := worker.NewHeartbeatEvery(rdb, "w-facts", "paddock:", 3*time.Second, 100*time.Millisecond)
	var running atomic.Int64
	hb.Status = func(b *job.WorkerBeat) { b.Concurrency, b.Running, b.Pool = 6, int(running.Load()), 2 }
	require.NoError(t, hb.Start(ctx))
	t.Cleanup(hb.Stop)

	read := func() job.WorkerBeat {
		v, err := rdb.Get(ctx, "paddock:worker:w-facts").Result()
		require.NoError(t, err)
		b, err := job.ParseWorkerBeat("w-facts", v)
		require.NoError(t, err, v)
		return b
	}
	b := read()
	host, _ := os.Hostname()
	assert.Equal(t, job.WorkerBeat{ID: "w-facts", Host: host, PID: os.Getpid(), Concurrency: 6, Running: 0, Pool: 2,
		StartedAt: b.StartedAt, BeatAt: b.BeatAt}, b)
	assert.False(t, b.BeatAt.Before(b.StartedAt))
	running.Store(3)
	testsvc.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { return read().Running == 3 },
		"the next beat writes the running count")

	old, err := job.ParseWorkerBeat("w-old", "2026-12-07T01:02:03.5Z")
	require.NoError(t, err, "an older worker's value, a bare time")
	assert.Equal(t, job.WorkerBeat{ID: "w-old", BeatAt: time.Date(2026, 12, 7, 1, 2, 3, 5e8, time.UTC)}, old)
	_, err = job.ParseWorkerBeat("w-bad", "{")
	assert.Error(t, err)
}
