package asynqx_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/asynqx"
)

// LostTasks finds the jobs without a task, against real asynq enqueues: it
// pins asynq v0.26's task key (asynq:{queue}:t:<id>) and follows a job
// moved to a rescue task (paddock:task:<key>).
func TestLostTasksFindsWhatRedisLost(t *testing.T) {
	t.Parallel()
	s := newRescueSetup(t)
	ctx := context.Background()
	for _, id := range []string{"there", "rescued#rescue-1"} {
		_, err := s.cl.EnqueueContext(ctx, asynq.NewTask("t", nil), asynq.TaskID(id), asynq.Queue("q1"))
		require.NoError(t, err)
	}
	require.NoError(t, s.rdb.Set(ctx, "paddock:task:rescued", "rescued#rescue-1", 0).Err())
	require.NoError(t, s.rdb.Set(ctx, "paddock:task:moved-away", "moved-away#rescue-1", 0).Err())
	l := asynqx.LostTasks{Store: s.store, RDB: s.rdb}

	lost, err := l.Missing(ctx, map[string]string{
		"there": "q1", "rescued": "q1", "gone": "q1", "moved-away": "q1", "wrong-queue": "q2",
	})
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{"there": false, "rescued": false, "gone": true, "moved-away": true, "wrong-queue": true}, lost)

	// A queue whose registration was lost with its tasks is registered
	// again, so asynq's inspector knows it.
	require.NoError(t, s.rdb.SRem(ctx, "asynq:queues", "q1").Err())
	_, err = l.Missing(ctx, map[string]string{"gone": "q1"})
	require.NoError(t, err)
	_, err = s.insp.GetQueueInfo("q1")
	assert.NoError(t, err)

	empty, err := l.Missing(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, empty)
}
