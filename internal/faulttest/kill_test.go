package faulttest

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// TestKill9WorkerMidJob: a worker killed with SIGKILL while it runs a job.
//
// Timeline (docs/reliability.md; asynq v0.26 facts for the original task):
//
//	T0          kill -9: the worker's control sockets close; paddock-init
//	            reads EOF (also in the middle of a command), kills every
//	            process and exits; AutoRemove removes the container (~1 s).
//	T0+7..8     the worker's heartbeat key (8 s TTL, last beat ≤ 1 s
//	            before T0) expires.
//	T0+7..10    a live worker's rescuer (every 2 s) finds the job in the
//	            dead worker's active set without a result, moves it to the
//	            task <key>#rescue-1 and enqueues that; a worker runs it
//	            within asynq's poll: Runs = 2, the first container long gone.
//	T0+30..37   the original task's lease (30 s) expired RetireMargin
//	            (5 s) ago: the rescuer retires it from asynq's active list,
//	            completed, never retried, never run (Runs stays 2); asynq's
//	            recoverer (T0+55..120) finds nothing left to retry.
func TestKill9WorkerMidJob(t *testing.T) {
	if testing.Short() {
		t.Skip("~50 s: waits for the rescuer to retire the original task (its 30 s lease plus a margin)")
	}
	t.Parallel()
	f := newFleet(t)
	f.scheduler("sched")
	w1 := f.worker("w1")
	id := testsvc.Unique("kill")
	f.submit(job.Spec{ID: id, Command: "sleep 20; echo done; : " + id})
	box := f.waitRunning(w1.id, id, time.Minute)
	require.Equal(t, 1, f.runs(id))
	w2 := f.worker("w2")

	t0 := time.Now()
	w1.signal(syscall.SIGKILL)
	_, ok := w1.wait(10 * time.Second)
	require.True(t, ok)
	// Well before the 20 s command could end: init kills it on stdin EOF.
	// (The job's box: a warm box the worker was creating when killed is
	// never started, and a live worker's reaper removes it later.)
	f.waitFor(15*time.Second, "the killed worker's job container to be gone", func() bool {
		return !slices.Contains(f.containers(w1.id), box)
	})
	gone := time.Since(t0)

	r := f.result(id, 2*time.Minute)
	t.Logf("timeline after kill -9: containers gone %s, job re-started %s, result %s",
		gone.Round(100*time.Millisecond), r.StartedAt.Sub(t0).Round(100*time.Millisecond),
		r.FinishedAt.Sub(t0).Round(100*time.Millisecond))
	assert.Equal(t, job.StateSucceeded, r.State, r.Error)
	assert.Equal(t, "done\n", r.Stdout.Text)
	assert.Equal(t, w2.id, r.Worker)
	assert.Equal(t, 2, r.Runs, "the result records the second run")
	assert.True(t, r.StartedAt.After(t0.Add(gone)), "the re-run started before the first run's container was gone")
	assert.Equal(t, 2, f.runs(id))
	// The re-run was the rescue task (not asynq's recovery of the original).
	f.waitFor(30*time.Second, "the rescue task to complete", func() bool {
		info, err := f.insp.GetTaskInfo(job.DefaultQueue, job.Key("", id)+"#rescue-1")
		return err == nil && info.State == asynq.TaskStateCompleted
	})

	// The rescuer retires the original task once its lease expired: it
	// completes without running the job a third time, and without the
	// retry asynq's recoverer would have given it.
	f.waitFor(3*time.Minute, "the original task to complete", func() bool {
		st, _, err := f.taskState(id)
		return err == nil && st == asynq.TaskStateCompleted
	})
	_, retried, err := f.taskState(id)
	require.NoError(t, err)
	assert.Zero(t, retried, "asynq's recoverer, not the rescuer, took the original task out of the active list")
	assert.Equal(t, 2, f.runs(id), "the original task ran the job again")
	stored, err := f.store.Get(t.Context(), job.Key("", id))
	require.NoError(t, err)
	assert.Equal(t, r.FinishedAt.UnixNano(), stored.FinishedAt.UnixNano())
}
