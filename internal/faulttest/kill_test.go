package faulttest

import (
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
// Timeline (asynq v0.26 facts, docs/reliability.md):
//
//	T0         kill -9: the worker's attach connections close; Docker
//	           closes each container's stdin, paddock-init reads EOF (also
//	           in the middle of a command), kills every process and exits;
//	           AutoRemove removes the container (~1 s). The reaper of any
//	           live worker on the host is the fail-safe once the dead
//	           worker's heartbeat (30 s) expires.
//	T0+25..30  the task's lease (30 s, last extended ≤ 5 s before T0)
//	           expires.
//	T0+55..120 a recoverer pass (every minute per worker process) finds
//	           the lease expired ≥ 30 s ago and moves the task to retry
//	           (delay 1 s); the forwarder (5 s) makes it pending.
//	then       another worker runs it again: Runs = 2, the first
//	           container long gone, so the runs never overlap.
func TestKill9WorkerMidJob(t *testing.T) {
	if testing.Short() {
		t.Skip("~90 s: asynq re-queues a crashed worker's task after its 30 s lease expired plus a 1-minute recoverer pass")
	}
	t.Parallel()
	f := newFleet(t)
	f.scheduler("sched")
	w1 := f.worker("w1")
	id := testsvc.Unique("kill")
	f.submit(job.Spec{ID: id, Command: "sleep 20; echo done; : " + id})
	f.waitRunning(w1.id, id, time.Minute)
	require.Equal(t, 1, f.runs(id))
	w2 := f.worker("w2")

	t0 := time.Now()
	w1.signal(syscall.SIGKILL)
	_, ok := w1.wait(10 * time.Second)
	require.True(t, ok)
	// Well before the 20 s command could end: init kills it on stdin EOF.
	f.waitFor(15*time.Second, "the killed worker's containers to be gone", func() bool {
		return len(f.containers(w1.id)) == 0
	})
	gone := time.Since(t0)

	r := f.result(id, 4*time.Minute)
	t.Logf("timeline after kill -9: containers gone %s, job re-started %s, result %s",
		gone.Round(100*time.Millisecond), r.StartedAt.Sub(t0).Round(100*time.Millisecond),
		r.FinishedAt.Sub(t0).Round(100*time.Millisecond))
	assert.Equal(t, job.StateSucceeded, r.State, r.Error)
	assert.Equal(t, "done\n", r.Stdout.Text)
	assert.Equal(t, w2.id, r.Worker)
	assert.Equal(t, 2, r.Runs, "the result records the second run")
	assert.True(t, r.StartedAt.After(t0.Add(gone)), "the re-run started before the first run's container was gone")
	assert.Equal(t, 2, f.runs(id))

	// Exactly one terminal state, and the task is done (not retried again).
	f.waitFor(30*time.Second, "the task to complete", func() bool {
		st, _, err := f.taskState(id)
		return err == nil && st == asynq.TaskStateCompleted
	})
	stored, err := f.store.Get(t.Context(), job.Key("", id))
	require.NoError(t, err)
	assert.Equal(t, r.FinishedAt.UnixNano(), stored.FinishedAt.UnixNano())
}
