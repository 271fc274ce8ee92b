package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

// TestSweeperRecordsAbandonedJobs: an archived job task without a result
// (its workers crashed on every try) gets an `infra` result; one that has
// a result keeps it; both archived tasks are deleted.
func TestSweeperRecordsAbandonedJobs(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	archive := func(id string) {
		payload, err := json.Marshal(job.Spec{ID: id, Command: "echo", Queue: "default", Labels: map[string]string{"k": "v"}})
		require.NoError(t, err)
		_, err = s.asynq.Enqueue(asynq.NewTask(job.TaskType, payload), asynq.TaskID(taskKey(id)), asynq.Queue("default"))
		require.NoError(t, err)
		require.NoError(t, s.insp.ArchiveTask("default", taskKey(id)))
	}
	archive("abandoned")
	archive("ended")
	r := job.Result{ID: "ended"}
	r.Finish(job.ReasonOK)
	_, _, err := s.store.Record(ctx, r)
	require.NoError(t, err)
	_, err = s.asynq.Enqueue(asynq.NewTask("other:type", nil), asynq.TaskID("foreign"), asynq.Queue("default"))
	require.NoError(t, err)
	require.NoError(t, s.insp.ArchiveTask("default", "foreign"))

	sw, err := scheduler.NewSweeper(s.insp, s.store, scheduler.SweeperConfig{Queues: caps.Queues, Logger: quiet()})
	require.NoError(t, err)
	n, err := sw.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	got := s.result("abandoned")
	assert.Equal(t, job.StateInfra, got.State)
	assert.Contains(t, got.Error, "gave up on the job after 1 tries")
	assert.Equal(t, map[string]string{"k": "v"}, got.Labels)
	assert.Equal(t, job.StateSucceeded, s.result("ended").State)
	s.noTask("default", "abandoned")
	s.noTask("default", "ended")
	_, err = s.insp.GetTaskInfo("default", "foreign")
	assert.NoError(t, err, "tasks of other types are not Paddock's")

	n, err = sw.Sweep(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	for range 3 {
		require.NoError(t, sw.Start(ctx))
		require.NoError(t, sw.Start(ctx))
		sw.Stop()
		sw.Stop()
	}
}

// TestSweeperMapsRescueTasksToTheirJob: an archived rescue task
// (<key>#rescue-<run>, its tries used up) that carries its job gets the
// job's `infra` result under the job key; an archived original task whose
// job a rescue carries now is stale: it gets no result (the rescue runs
// the job) and is deleted all the same.
func TestSweeperMapsRescueTasksToTheirJob(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	enqueue := func(id, taskID string) {
		payload, err := json.Marshal(job.Spec{ID: id, Command: "echo", Queue: "default"})
		require.NoError(t, err)
		_, err = s.asynq.Enqueue(asynq.NewTask(job.TaskType, payload), asynq.TaskID(taskID), asynq.Queue("default"))
		require.NoError(t, err)
	}
	// rescued: the rescue task is archived and carries the job.
	enqueue("rescued", taskKey("rescued")+"#rescue-1")
	require.NoError(t, s.rdb.Set(ctx, "paddock:task:"+taskKey("rescued"), taskKey("rescued")+"#rescue-1", time.Hour).Err())
	require.NoError(t, s.insp.ArchiveTask("default", taskKey("rescued")+"#rescue-1"))
	// moved: the original is archived, its rescue still pending.
	enqueue("moved", taskKey("moved"))
	enqueue("moved", taskKey("moved")+"#rescue-1")
	require.NoError(t, s.rdb.Set(ctx, "paddock:task:"+taskKey("moved"), taskKey("moved")+"#rescue-1", time.Hour).Err())
	require.NoError(t, s.insp.ArchiveTask("default", taskKey("moved")))

	sw, err := scheduler.NewSweeper(s.insp, s.store, scheduler.SweeperConfig{Queues: caps.Queues, Logger: quiet()})
	require.NoError(t, err)
	n, err := sw.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, job.StateInfra, s.result("rescued").State, "the rescue's job")
	_, err = s.store.Get(ctx, taskKey("rescued")+"#rescue-1")
	assert.ErrorIs(t, err, results.ErrNotFound, "a result under the rescue task's id")
	_, err = s.store.Get(ctx, taskKey("moved"))
	assert.ErrorIs(t, err, results.ErrNotFound, "a stale archived original ended the job its rescue carries")
	s.noTask("default", taskKey("rescued")+"#rescue-1")
	s.noTask("default", taskKey("moved"))
	info, err := s.insp.GetTaskInfo("default", taskKey("moved")+"#rescue-1")
	require.NoError(t, err)
	assert.Equal(t, asynq.TaskStatePending, info.State, "the rescue was touched")
}
