package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/asynqx"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

// TestCancelReachesTheRescueTask: a job whose worker died is carried by
// its rescue task (<key>#rescue-1, pending) while the original task waits
// in asynq's retry set. A cancel removes the rescue task, the one that
// would run the job, and records `canceled` saying so; it does not report
// the job "canceled while waiting for a retry; it never ran" after
// deleting the stale original, leaving the rescue to run it.
func TestCancelReachesTheRescueTask(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	id := testsvc.Unique("rescued")
	key := taskKey(id)
	payload, err := json.Marshal(job.Spec{ID: id, Command: "echo", Queue: "default"})
	require.NoError(t, err)
	_, err = s.asynq.Enqueue(asynq.NewTask(job.TaskType, payload), asynq.TaskID(key), asynq.Queue("default"),
		asynq.MaxRetry(3), asynq.Retention(time.Hour))
	require.NoError(t, err)

	// A worker (a real asynq server) begins run 1 and then fails it: asynq
	// moves the original to its retry set. The worker never beats, so the
	// rescuer takes it for dead and moves the job to its rescue task.
	dead := testsvc.Unique("dead")
	ran := make(chan struct{})
	srv := asynq.NewServerFromRedisClient(s.rdb, asynq.Config{
		Concurrency: 1, Queues: map[string]int{"default": 1}, LogLevel: asynq.FatalLevel,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour },
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(job.TaskType, func(ctx context.Context, _ *asynq.Task) error {
		defer close(ran)
		_, err := s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: dead, TaskID: key, Queue: "default"})
		require.NoError(t, err)
		return errors.New("injected: the worker lost its box")
	})
	require.NoError(t, srv.Start(mux))
	select {
	case <-ran:
	case <-time.After(wait):
		t.Fatal("the original task was not handled")
	}
	require.Eventually(t, func() bool {
		info, err := s.insp.GetTaskInfo("default", key)
		return err == nil && info.State == asynq.TaskStateRetry
	}, wait, 10*time.Millisecond, "the original task is not in the retry set")
	srv.Shutdown() // before the rescue task exists: it must stay pending
	got, err := asynqx.NewRescuer(s.rdb, asynqx.RescuerConfig{Logger: quiet()}).Pass(ctx)
	require.NoError(t, err)
	rescue := asynqx.RescueID(key, 1)
	require.Equal(t, []string{rescue}, got)

	c, err := scheduler.NewCanceler(s.nc, s.insp, s.store, scheduler.CancelerConfig{Queues: caps.Queues, Logger: quiet()})
	require.NoError(t, err)
	reply, err := c.Cancel(ctx, job.DefaultTenant, id)
	require.NoError(t, err)
	assert.Equal(t, job.CancelQueued, reply.Outcome, reply.Message)
	assert.Contains(t, reply.Message, rescue)
	assert.NotContains(t, reply.Message, "waiting for a retry", "the stale original was canceled")
	s.noTask("default", rescue)
	r := s.result(id)
	assert.Equal(t, job.ReasonCanceled, r.Reason)
	assert.Contains(t, r.Error, "its earlier run was lost with its worker")
}
