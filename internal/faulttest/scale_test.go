package faulttest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

// TestScaleWorkers measures throughput of short jobs (`true`) with 1, 2
// and 3 worker processes (concurrency 2, warm pool 2 each) behind 2
// schedulers on one host. A measurement, not a check: it runs only with
// PADDOCK_SCALE=1 (PADDOCK_SCALE_JOBS per step, default 150).
func TestScaleWorkers(t *testing.T) {
	if os.Getenv("PADDOCK_SCALE") != "1" {
		t.Skip("measurement: set PADDOCK_SCALE=1")
	}
	n := 150
	if v, err := strconv.Atoi(os.Getenv("PADDOCK_SCALE_JOBS")); err == nil && v > 0 {
		n = v
	}
	for workers := 1; workers <= 3; workers++ {
		t.Run(fmt.Sprintf("%d-workers", workers), func(t *testing.T) {
			f := newFleet(t)
			f.scheduler("s1")
			f.scheduler("s2")
			owners := make([]string, workers)
			for i := range workers {
				owners[i] = f.worker(fmt.Sprintf("w%d", i+1), "--pool-size", "2").id
			}
			// Warm-up: one job per worker slot.
			warm := make([]job.Spec, 2*workers)
			for i := range warm {
				warm[i] = job.Spec{Command: "true"}
			}
			f.checkAllOK(f.submitAll(warm, time.Minute), 2*time.Minute)
			f.waitWarm(2, owners...)
			specs := make([]job.Spec, n)
			for i := range specs {
				specs[i] = job.Spec{Command: "true"}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			t0 := time.Now()
			subs, err := f.client.SubmitBatch(ctx, specs, nil)
			require.NoError(t, err)
			ids := make([]string, n)
			for i, s := range subs {
				ids[i] = s.ID
			}
			_, err = f.client.WaitAll(ctx, ids, nil)
			require.NoError(t, err)
			el := time.Since(t0)
			t.Logf("%d worker process(es): %d jobs in %s = %.2f jobs/s", workers, n, el.Round(time.Millisecond), float64(n)/el.Seconds())
		})
	}
}
