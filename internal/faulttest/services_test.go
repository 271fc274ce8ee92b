package faulttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

// submitAll submits specs one by one, retrying each (same id: safe) until
// it is acked or the deadline passes, and returns the acked ids. Only an
// acked submission is "accepted" and must end with a result.
func (f *fleet) submitAll(specs []job.Spec, deadline time.Duration) []string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	ids := make([]string, 0, len(specs))
	for _, s := range specs {
		for {
			sctx, c := context.WithTimeout(ctx, 5*time.Second)
			sub, err := f.client.Submit(sctx, s)
			c()
			if err == nil {
				ids = append(ids, sub.ID)
				break
			}
			require.NoError(f.t, ctx.Err(), "submission %s never acked: %v", s.ID, err)
			// sleep: the back-off of a retried submission while a service is down.
			time.Sleep(100 * time.Millisecond)
		}
	}
	return ids
}

func specs(prefix string, n int, cmd string) []job.Spec {
	out := make([]job.Spec, n)
	for i := range out {
		out[i] = job.Spec{ID: fmt.Sprintf("%s-%03d", prefix, i), Command: fmt.Sprintf(cmd, i)}
	}
	return out
}

// checkAllOK waits for every id's result and checks that each succeeded
// once, and that the queue is empty: nothing stuck active, pending or
// waiting for a retry.
func (f *fleet) checkAllOK(ids []string, timeout time.Duration) map[int]int {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rs, err := f.client.WaitAll(ctx, ids, nil)
	require.NoError(f.t, err)
	require.Len(f.t, rs, len(ids))
	runs := map[int]int{}
	for i, r := range rs {
		assert.Equal(f.t, ids[i], r.ID)
		assert.Equal(f.t, job.StateSucceeded, r.State, "%s: %s %s", r.ID, r.Reason, r.Error)
		assert.GreaterOrEqual(f.t, r.Runs, 1)
		runs[r.Runs]++
	}
	f.waitFor(2*time.Minute, "an empty queue (nothing stuck active)", func() bool {
		q, err := f.insp.GetQueueInfo(job.DefaultQueue)
		return err == nil && q.Active == 0 && q.Pending == 0 && q.Retry == 0 && q.Scheduled == 0
	})
	return runs
}

// TestRedisRestartMidRun: Redis crashes (SIGKILL) and restarts from its
// AOF (appendfsync always) twice while jobs run and while more are being
// submitted. Every acked job ends with one result; none stays active.
func TestRedisRestartMidRun(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.scheduler("sched")
	f.worker("w1")
	f.worker("w2")
	first := f.submitAll(specs("redis-a", 24, "sleep 0.5; echo a%d"), time.Minute)
	f.waitFor(time.Minute, "the first results", func() bool {
		_, err := f.store.Get(context.Background(), job.Key("", first[3]))
		return err == nil
	})
	done := make(chan []string)
	go func() { done <- f.submitAll(specs("redis-b", 24, "sleep 0.5; echo b%d"), 2*time.Minute) }()
	f.redis.Restart()
	// The second crash comes once the fleet works again after the first:
	// a result recorded since (or every first job done).
	stored := func() int {
		n := 0
		for _, id := range first {
			if _, err := f.store.Get(context.Background(), job.Key("", id)); err == nil {
				n++
			}
		}
		return n
	}
	n0 := stored()
	f.waitFor(time.Minute, "a result recorded after the first crash", func() bool {
		n := stored()
		return n > n0 || n == len(first)
	})
	f.redis.Restart()
	ids := append(first, <-done...)
	runs := f.checkAllOK(ids, 4*time.Minute)
	t.Logf("%d jobs across two Redis crashes: runs per job %v", len(ids), runs)
}

// TestNATSRestartMidRun: the NATS server restarts (same port and
// JetStream store) while jobs run. Every acked submission ends with a
// result, published on NATS after the reconnect (WaitAll reads them from
// the results stream).
func TestNATSRestartMidRun(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.scheduler("sched")
	f.worker("w1")
	f.worker("w2")
	first := f.submitAll(specs("nats-a", 24, "sleep 0.5; echo a%d"), time.Minute)
	f.waitFor(time.Minute, "the first results", func() bool {
		_, err := f.store.Get(context.Background(), job.Key("", first[3]))
		return err == nil
	})
	f.nats.Restart()
	second := f.submitAll(specs("nats-b", 24, "sleep 0.5; echo b%d"), 2*time.Minute)
	f.nats.Restart()
	ids := append(first, second...)
	runs := f.checkAllOK(ids, 4*time.Minute)
	t.Logf("%d jobs across two NATS restarts: runs per job %v", len(ids), runs)
}

// TestNATSOutageDuringResults: NATS is down for longer than a publish
// waits (20 s) while jobs finish, and the worker that recorded their
// results is killed before NATS is back (its buffered publishes die with
// it). The results are in Redis at once; a scheduler's republisher
// publishes them when NATS answers again, and another worker runs the rest.
func TestNATSOutageDuringResults(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.scheduler("sched")
	w1 := f.worker("w1")
	ids := f.submitAll(specs("outage", 8, "sleep 2; echo o%d"), time.Minute)
	f.waitFor(time.Minute, "the jobs to start", func() bool { return f.runs(ids[0]) > 0 })
	f.nats.Stop()
	f.waitFor(time.Minute, "results recorded during the outage", func() bool {
		_, err := f.store.Get(context.Background(), job.Key("", ids[2]))
		return err == nil
	})
	// The witness that the first publishes timed out: the worker says so.
	f.waitFor(time.Minute, "a result the worker stored but could not publish", func() bool {
		b, err := os.ReadFile(w1.log)
		require.NoError(t, err)
		return bytes.Contains(b, []byte("result stored but not published"))
	})
	w1.signal(syscall.SIGKILL)
	f.nats.Restart()
	f.worker("w2")
	runs := f.checkAllOK(ids, 4*time.Minute)
	t.Logf("%d jobs across a NATS outage and a worker crash: runs per job %v", len(ids), runs)
}
