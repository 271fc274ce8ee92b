package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
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
