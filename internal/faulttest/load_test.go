package faulttest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

// loadJobs is the size of the load run; PADDOCK_LOAD_JOBS overrides it
// (1000 for the run docs/reliability.md quotes). The default is 400 in
// make test: the run is bounded by the engine's container churn, and the
// compose test (200 jobs, a worker killed) and the short fleet harness
// (300 jobs over three hosts, four faults) run the same path in the same
// make test, so a longer run here added minutes, not coverage.
func loadJobs() int {
	if n, err := strconv.Atoi(os.Getenv("PADDOCK_LOAD_JOBS")); err == nil && n > 0 {
		return n
	}
	return 400
}

// TestLoad: hundreds of short jobs (loadJobs) through 2 schedulers and 3 worker
// processes. Every job has exactly one terminal result, ran exactly once
// (the per-job run counter), the three workers share the work, and the
// counts add up in the results store, the results stream and the queue.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("minutes: bounded by the engine's container churn (~4-6 containers/s on 2 cores)")
	}
	t.Parallel()
	f := newFleet(t)
	f.scheduler("s1")
	f.scheduler("s2")
	workers := []*proc{f.worker("w1", "--pool-size", "2"), f.worker("w2", "--pool-size", "2"), f.worker("w3", "--pool-size", "2")}
	n := loadJobs()
	specs := make([]job.Spec, n)
	for i := range specs {
		specs[i] = job.Spec{ID: fmt.Sprintf("load-%04d", i), Command: "true"}
		if i%2 == 1 {
			specs[i].Command = "echo " + specs[i].ID
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	t0 := time.Now()
	subs, err := f.client.SubmitBatch(ctx, specs, nil)
	require.NoError(t, err)
	submitted := time.Since(t0)
	ids := make([]string, n)
	for i, s := range subs {
		ids[i] = s.ID
	}
	rs, err := f.client.WaitAll(ctx, ids, nil)
	require.NoError(t, err)
	elapsed := time.Since(t0)
	require.Len(t, rs, n)

	byWorker := map[string]int{}
	for i, r := range rs {
		require.Equal(t, ids[i], r.ID)
		if !assert.Equal(t, job.StateSucceeded, r.State, "%s: %s %s", r.ID, r.Reason, r.Error) {
			continue
		}
		assert.Equal(t, 1, r.Runs, r.ID)
		if i%2 == 1 {
			assert.Equal(t, r.ID+"\n", r.Stdout.Text)
		}
		byWorker[r.Worker]++
	}
	for _, w := range workers {
		assert.Positive(t, byWorker[w.id], "worker %s ran nothing", w.name)
	}

	// The per-job run counters: one start each, none doubled.
	keys := make([]string, n)
	for i, id := range ids {
		keys[i] = "paddock:runs:" + job.Key("", id)
	}
	vals, err := f.rdb.MGet(ctx, keys...).Result()
	require.NoError(t, err)
	total := 0
	for i, v := range vals {
		c, _ := strconv.Atoi(fmt.Sprint(v))
		assert.Equal(t, 1, c, "run counter of %s", ids[i])
		total += c
	}
	assert.Equal(t, n, total)
	// One stored result per job, one message per job in the results stream,
	// one completed task per job.
	nres, err := f.rdb.Eval(ctx, `return #redis.call('KEYS', 'paddock:result:default/load-*')`, nil).Int()
	require.NoError(t, err)
	assert.Equal(t, n, nres)
	js, err := jetstream.New(f.nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, job.ResultsStream(job.DefaultTenant))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(n), info.State.Msgs, "results in the stream")
	f.waitFor(time.Minute, "every task completed", func() bool {
		q, err := f.insp.GetQueueInfo(job.DefaultQueue)
		return err == nil && q.Completed == n && q.Active == 0 && q.Pending == 0 && q.Retry == 0 && q.Archived == 0
	})
	t.Logf("%d jobs, 3 workers × concurrency 2, 2 schedulers: submitted in %s, all results in %s: %.1f jobs/s; per worker %v",
		n, submitted.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), byWorker)
}
