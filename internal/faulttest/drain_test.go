package faulttest

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// TestDrainFinishesRunningJob: SIGTERM stops claiming; a job shorter than
// the grace finishes; the worker exits 0 with no container left. The
// scheduler drains and exits 0 too.
func TestDrainFinishesRunningJob(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	sched := f.scheduler("sched")
	w1 := f.worker("w1", "--shutdown-timeout", "30s")
	id := testsvc.Unique("drain")
	f.submit(job.Spec{ID: id, Command: "sleep 3; echo finished; : " + id})
	f.waitRunning(w1.id, id, time.Minute)

	w1.signal(syscall.SIGTERM)
	t0 := time.Now()
	// Submitted once w1 drains (its log says so: the signal is handled
	// asynchronously, and before that its free slot may claim anything).
	testsvc.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		return strings.Contains(w1.tail(50), "worker draining")
	}, "w1 never said it drains:\n%s", w1.tail(20))
	late := f.submit(job.Spec{Command: "echo late"})
	code, ok := w1.wait(60 * time.Second)
	require.True(t, ok, "the worker did not exit")
	assert.Equal(t, 0, code, w1.tail(20))
	t.Logf("worker exited %s after SIGTERM", time.Since(t0).Round(100*time.Millisecond))
	assert.Empty(t, f.containers(w1.id), "the drained worker left containers")

	r := f.result(id, 10*time.Second)
	assert.Equal(t, job.StateSucceeded, r.State, r.Error)
	assert.Equal(t, "finished\n", r.Stdout.Text)
	assert.Equal(t, 1, r.Runs)
	assert.Equal(t, w1.id, r.Worker)

	_, err := f.store.Get(t.Context(), job.Key("", late))
	require.Error(t, err, "a draining worker claimed a new job")
	w2 := f.worker("w2")
	lr := f.result(late, time.Minute)
	assert.Equal(t, w2.id, lr.Worker)

	sched.signal(syscall.SIGTERM)
	code, ok = sched.wait(30 * time.Second)
	require.True(t, ok, "the scheduler did not exit")
	assert.Equal(t, 0, code, sched.tail(20))
}

// TestDrainKillsAndRequeuesAfterGrace: a job longer than the grace is
// killed at the end of it, its container confirmed gone, and its task put
// back in the queue (not counted as a retry); another worker runs it.
func TestDrainKillsAndRequeuesAfterGrace(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.scheduler("sched")
	w1 := f.worker("w1", "--shutdown-timeout", "2s")
	id := testsvc.Unique("long")
	f.submit(job.Spec{ID: id, Command: "sleep 12; echo second; : " + id})
	f.waitRunning(w1.id, id, time.Minute)

	w1.signal(syscall.SIGTERM)
	t0 := time.Now()
	code, ok := w1.wait(60 * time.Second)
	require.True(t, ok, "the worker did not exit")
	assert.Equal(t, 0, code, w1.tail(20))
	t.Logf("worker exited %s after SIGTERM (grace 2 s)", time.Since(t0).Round(100*time.Millisecond))
	// By the time the task was back in the queue the container was gone:
	// nothing of w1 is left now, and the task waits, not as a retry.
	assert.Empty(t, f.containers(w1.id))
	st, retried, err := f.taskState(id)
	require.NoError(t, err)
	assert.Equal(t, asynq.TaskStatePending, st)
	assert.Zero(t, retried, "a drained job is re-queued, not retried")
	_, err = f.store.Get(t.Context(), job.Key("", id))
	require.Error(t, err, "the interrupted job must not have a result")

	w2 := f.worker("w2")
	r := f.result(id, 2*time.Minute)
	assert.Equal(t, job.StateSucceeded, r.State, r.Error)
	assert.Equal(t, "second\n", r.Stdout.Text)
	assert.Equal(t, 2, r.Runs)
	assert.Equal(t, w2.id, r.Worker)
}
