package faulttest

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// watchdogBound is how long a box may outlive a worker that went away:
// init's watchdog (5 s) plus the reaper's period (15 s) as the fail-safe.
const watchdogBound = 20 * time.Second

// TestKill9WorkerWhileJobHoldsInit: the job tries to keep init's stdin
// and stdout open (it used to keep the box alive past its worker that
// way), then the worker is killed with SIGKILL. The box must not outlive
// the worker: init sees its control socket close and ends everything.
//
// The kill can also catch the warm pool's refill (the job took the pool's
// box a moment before) between create and start: that container never
// ran, so no init can end it and the engine's AutoRemove, which acts when
// a container stops, never applies. Only the reaper of a live worker
// removes it, once the dead one's heartbeat is gone. This is what failed
// as "boxes gone after more than 20 s under load": the test waited for it
// within the bound of a box that runs, with no other worker to reap it.
func TestKill9WorkerWhileJobHoldsInit(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.scheduler("sched")
	w1 := f.worker("w1")
	id := testsvc.Unique("hold")
	f.submit(job.Spec{ID: id, Command: "exec 3>/proc/1/fd/0 4</proc/1/fd/1 5>/proc/1/fd/2 2>/dev/null; sleep 200; : " + id})
	box := f.waitRunning(w1.id, id, time.Minute)
	t0 := time.Now()
	w1.signal(syscall.SIGKILL)
	_, ok := w1.wait(10 * time.Second)
	require.True(t, ok)
	var unstarted []string
	f.waitFor(watchdogBound, "the killed worker's boxes that ran to be gone", func() bool {
		unstarted = unstarted[:0]
		for _, c := range f.containerStates(w1.id) {
			if c.ID == box || c.State != container.StateCreated {
				return false
			}
			unstarted = append(unstarted, c.ID)
		}
		return true
	})
	t.Logf("boxes gone %s after kill -9 (the command would have slept 200 s); %d never started", time.Since(t0).Round(100*time.Millisecond), len(unstarted))
	if len(unstarted) == 0 {
		return
	}
	f.waitFor(time.Minute, "the killed worker's heartbeat to expire", func() bool {
		n, err := f.rdb.Exists(context.Background(), "paddock:worker:"+w1.id).Result()
		require.NoError(t, err)
		return n == 0
	})
	f.worker("w2") // its reaper makes a pass at start
	f.waitFor(time.Minute, "a live worker's reaper to remove the boxes that never started", func() bool {
		return len(f.containers(w1.id)) == 0
	})
}

// TestStoppedWorkerWatchdog: a worker that is alive but silent (SIGSTOP:
// no heartbeat reaches its boxes) loses its boxes to their watchdogs. When
// it resumes, it knows the silence was its own: the attempt is an
// infrastructure failure, retried, and the re-run succeeds.
func TestStoppedWorkerWatchdog(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.scheduler("sched")
	w1 := f.worker("w1")
	id := testsvc.Unique("stop")
	f.submit(job.Spec{ID: id, Command: "sleep 25; echo done; : " + id})
	f.waitRunning(w1.id, id, time.Minute)
	w1.signal(syscall.SIGSTOP)
	t0 := time.Now()
	stopped := true
	defer func() {
		if stopped {
			w1.signal(syscall.SIGCONT)
		}
	}()
	f.waitFor(watchdogBound, "the stopped worker's boxes to end by their watchdog", func() bool {
		return len(f.containers(w1.id)) == 0
	})
	t.Logf("boxes gone %s after SIGSTOP", time.Since(t0).Round(100*time.Millisecond))
	w1.signal(syscall.SIGCONT)
	stopped = false

	r := f.result(id, 2*time.Minute)
	assert.Equal(t, job.StateSucceeded, r.State, r.Error)
	assert.Equal(t, "done\n", r.Stdout.Text)
	assert.Equal(t, 2, r.Runs, "the worker's own silence is retried, once")
}
