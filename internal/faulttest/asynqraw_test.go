package faulttest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// asynqRawQueue is the queue of the asynq_raw rounds: no Paddock worker
// listens on it, so the round measures asynq alone.
const asynqRawQueue = "asynq_raw"

// rawRound is one round of asynq_raw: asynq by itself, on the Redis (and
// with the Redis settings) of the control_plane round it follows. Producers
// enqueue no-op tasks while one server (concurrency 16, the library's
// usual setting) processes them; the round ends at the last task done.
type rawRound struct {
	Tasks       int     `json:"tasks"`
	Seconds     float64 `json:"seconds"`
	JobsPerS    float64 `json:"jobs_per_s"`    // tasks / (first enqueue → last task done)
	EnqueuePerS float64 `json:"enqueue_per_s"` // tasks / (first enqueue → last enqueue)
	Appendfsync string  `json:"appendfsync"`
}

// measureAsynqRaw runs one asynq_raw round of n tasks on the Redis opt
// points at, with producers goroutines enqueueing.
func measureAsynqRaw(t *testing.T, opt *redis.Options, n, producers int) rawRound {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	fsync, err := rdb.ConfigGet(ctx, "appendfsync").Result()
	require.NoError(t, err)

	var done atomic.Int64
	finished := make(chan time.Time, 1)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 16, Queues: map[string]int{asynqRawQueue: 1},
		LogLevel: asynq.ErrorLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(n) {
			finished <- time.Now()
		}
		return nil
	})))
	defer srv.Shutdown()

	client := asynq.NewClientFromRedisClient(rdb)
	start := time.Now()
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, producers)
	for range producers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if _, err := client.EnqueueContext(ctx, asynq.NewTask("noop", nil), asynq.Queue(asynqRawQueue), asynq.MaxRetry(0)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	enqueued := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(t, err, "asynq_raw: enqueue")
	}
	var end time.Time
	select {
	case end = <-finished:
	case <-time.After(2 * time.Minute):
		t.Fatalf("asynq_raw: %d of %d no-op tasks done after 2 minutes", done.Load(), n)
	}
	secs := end.Sub(start).Seconds()
	require.NoError(t, asynq.NewInspectorFromRedisClient(rdb).DeleteQueue(asynqRawQueue, true))
	return rawRound{Tasks: n, Seconds: round1(secs*10) / 10, JobsPerS: round1(float64(n) / secs),
		EnqueuePerS: round1(float64(n) / enqueued.Seconds()), Appendfsync: fsync["appendfsync"]}
}

// asynqRawResult is scenario asynq_raw (per variant: the median round) and
// control_plane's ratio to it, keyed by the variant's appendfsync setting:
// the control-plane targets are these ratios.
func asynqRawResult(vs []cpVariant) (raw map[string]any, ratios map[string]float64) {
	raw = map[string]any{"note": "asynq v0.26 alone on the control_plane rounds' Redis and settings, in the same run: " +
		"producers enqueue no-op tasks while one server (concurrency 16) processes them; jobs/s from the first enqueue to the last task done"}
	ratios = map[string]float64{}
	var variants []map[string]any
	for _, v := range vs {
		if len(v.raw) == 0 {
			continue
		}
		m, cp := rawMedian(v.raw), median(v.rounds).JobsPerS
		key := "jobs_per_s_" + m.Appendfsync
		if _, seen := raw[key]; !seen {
			raw[key] = m.JobsPerS
			ratios["ratio_to_asynq_raw_"+m.Appendfsync] = round1(cp/m.JobsPerS*100) / 100
		}
		variants = append(variants, map[string]any{"name": v.Name, "appendfsync": m.Appendfsync, "jobs_per_s": m.JobsPerS,
			"control_plane_jobs_per_s": round1(cp), "ratio": round1(cp/m.JobsPerS*100) / 100, "rounds": v.raw})
	}
	raw["variants"] = variants
	return raw, ratios
}

// asynqRawTable is the asynq_raw rows of the log's table.
func asynqRawTable(vs []cpVariant) string {
	s := "\n| variant | appendfsync | asynq_raw jobs/s (median) | enqueue/s | control_plane jobs/s | ratio |\n|---|---|---|---|---|---|\n"
	for _, v := range vs {
		if len(v.raw) == 0 {
			continue
		}
		m, cp := rawMedian(v.raw), median(v.rounds).JobsPerS
		s += fmt.Sprintf("| %s | %s | %.0f | %.0f | %.0f | %.2f |\n", v.Name, m.Appendfsync, m.JobsPerS, m.EnqueuePerS, cp, cp/m.JobsPerS)
	}
	return s
}

// rawMedian is the median round by jobs/s.
func rawMedian(rounds []rawRound) rawRound {
	rs := slices.Clone(rounds)
	slices.SortFunc(rs, func(a, b rawRound) int { return cmp.Compare(a.JobsPerS, b.JobsPerS) })
	return rs[len(rs)/2]
}
