package results_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

func spec(tenant, id string) job.Spec {
	return job.Spec{ID: id, Tenant: tenant, Command: "echo " + id, Image: "busybox", Queue: "default",
		Labels: map[string]string{"team": "a"}}
}

// list is every summary of q, page after page.
func listAll(t *testing.T, st *results.Store, q job.ListQuery) []job.Summary {
	t.Helper()
	var all []job.Summary
	for range 1000 {
		page, err := st.List(context.Background(), q)
		require.NoError(t, err)
		all = append(all, page.Jobs...)
		if page.NextCursor == "" {
			return all
		}
		q.Cursor = page.NextCursor
	}
	t.Fatal("the cursor never ended")
	return nil
}

func one(t *testing.T, st *results.Store, tenant, id string) job.Summary {
	t.Helper()
	page, err := st.List(context.Background(), job.ListQuery{Tenant: tenant, IDPrefix: id})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1, "summary of %s/%s", tenant, id)
	return page.Jobs[0]
}

// A job goes queued → running → terminal in the index, from the three
// write paths, and a terminal entry never changes again.
func TestIndexLifecycle(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	sp := spec("dev", "life")
	sp.Command = strings.Repeat("é", 300)
	queued := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	require.NoError(t, s.store.Queued(ctx, sp, queued))

	sum := one(t, s.store, "dev", "life")
	assert.Equal(t, job.StateQueued, sum.State)
	assert.Equal(t, "dev", sum.Tenant)
	assert.Equal(t, "busybox", sum.Image)
	assert.Equal(t, "default", sum.Queue)
	assert.Equal(t, map[string]string{"team": "a"}, sum.Labels)
	assert.Equal(t, strings.Repeat("é", job.MaxSummaryCommand), sum.Command)
	assert.True(t, queued.Equal(sum.QueuedAt), "queued_at %s, want %s", sum.QueuedAt, queued)
	assert.False(t, sum.UpdatedAt.IsZero())
	firstUpdate := sum.UpdatedAt

	run, err := s.store.BeginRun(ctx, sp.Key())
	require.NoError(t, err)
	require.Equal(t, 1, run)
	sum = one(t, s.store, "dev", "life")
	assert.Equal(t, job.StateRunning, sum.State)
	assert.Equal(t, 1, sum.Runs)
	assert.False(t, sum.StartedAt.IsZero())
	assert.True(t, sum.UpdatedAt.After(firstUpdate))

	// A late queued write (a redelivered submission) keeps it running.
	require.NoError(t, s.store.Queued(ctx, sp, queued))
	assert.Equal(t, job.StateRunning, one(t, s.store, "dev", "life").State)

	code := 3
	r := job.Result{ID: "life", Tenant: "dev", ExitCode: &code, Runs: 1, Queue: "default"}
	r.Finish(job.ReasonExitNonzero)
	_, _, err = s.store.Record(ctx, r)
	require.NoError(t, err)
	sum = one(t, s.store, "dev", "life")
	assert.Equal(t, job.StateFailed, sum.State)
	assert.Equal(t, job.ReasonExitNonzero, sum.Reason)
	require.NotNil(t, sum.ExitCode)
	assert.Equal(t, 3, *sum.ExitCode)
	assert.False(t, sum.FinishedAt.IsZero())
	final := sum.UpdatedAt

	// Another Record (a cancel losing the race), a re-run and a late
	// queued write leave the terminal entry alone.
	r2 := job.Result{ID: "life", Tenant: "dev"}
	r2.Finish(job.ReasonCanceled)
	_, _, err = s.store.Record(ctx, r2)
	require.NoError(t, err)
	_, err = s.store.BeginRun(ctx, sp.Key())
	require.NoError(t, err)
	require.NoError(t, s.store.Queued(ctx, sp, queued))
	sum = one(t, s.store, "dev", "life")
	assert.Equal(t, job.StateFailed, sum.State)
	assert.Equal(t, job.ReasonExitNonzero, sum.Reason)
	assert.Equal(t, 1, sum.Runs)
	assert.True(t, final.Equal(sum.UpdatedAt), "a terminal entry was updated again")
}

// A job that never went through the scheduler's queued write (rejected,
// or the write was lost) is indexed by its result alone.
func TestIndexResultOnly(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	r := job.Result{ID: "rej", Tenant: "dev", Error: "bad", SubmittedAt: time.Now().Add(-time.Minute)}
	r.Finish(job.ReasonRejected)
	_, _, err := s.store.Record(context.Background(), r)
	require.NoError(t, err)
	sum := one(t, s.store, "dev", "rej")
	assert.Equal(t, job.StateRejected, sum.State)
	assert.Equal(t, job.ReasonRejected, sum.Reason)
	assert.True(t, r.SubmittedAt.Truncate(time.Millisecond).Equal(sum.QueuedAt), "a rejected job is placed at its submit time")
}

// BeginRun indexes also right after Redis lost its scripts (EVALSHA
// answers NOSCRIPT inside the transaction: the run is counted once and the
// index written by loading the script).
func TestIndexAfterScriptFlush(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	sp := spec("dev", "flush")
	require.NoError(t, s.store.Queued(ctx, sp, time.Now()))
	require.NoError(t, s.rdb.ScriptFlush(ctx).Err())
	run, err := s.store.BeginRun(ctx, sp.Key())
	require.NoError(t, err)
	assert.Equal(t, 1, run)
	assert.Equal(t, job.StateRunning, one(t, s.store, "dev", "flush").State)
	run, err = s.store.BeginRun(ctx, sp.Key())
	require.NoError(t, err)
	assert.Equal(t, 2, run, "the run counter counted each run once")
	assert.Equal(t, 2, one(t, s.store, "dev", "flush").Runs)
}

// fillIndex queues n jobs of tenant named <prefix>-<i>, in order (i = 0
// first, so the last is the newest), in parallel.
func fillIndex(t testing.TB, st *results.Store, tenant, prefix string, n int, mod func(i int, sp *job.Spec)) {
	t.Helper()
	base := time.Now().Add(-time.Hour)
	var wg sync.WaitGroup
	const workers = 16
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				sp := spec(tenant, fmt.Sprintf("%s-%06d", prefix, i))
				if mod != nil {
					mod(i, &sp)
				}
				if err := st.Queued(context.Background(), sp, base.Add(time.Duration(i)*time.Millisecond)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Filters are applied server-side; the cursor walks every match once,
// newest first; a tenant sees only its own jobs, "" sees every tenant's.
func TestListFiltersAndCursor(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	fillIndex(t, s.store, "dev", "j", 60, func(i int, sp *job.Spec) {
		if i%3 == 0 {
			sp.Queue = "batch"
		}
		if i%5 == 0 {
			sp.Labels = map[string]string{"team": "b", "x": "1"}
		}
	})
	fillIndex(t, s.store, "other", "j", 7, nil)
	for i := 0; i < 60; i += 4 {
		r := job.Result{ID: fmt.Sprintf("j-%06d", i), Tenant: "dev"}
		r.Finish(job.ReasonOOM)
		_, _, err := s.store.Record(ctx, r)
		require.NoError(t, err)
	}

	all := listAll(t, s.store, job.ListQuery{Tenant: "dev", Limit: 7})
	require.Len(t, all, 60)
	seen := map[string]bool{}
	for i, sum := range all {
		assert.Equal(t, fmt.Sprintf("j-%06d", 59-i), sum.ID, "newest first")
		assert.Equal(t, "dev", sum.Tenant)
		assert.False(t, seen[sum.ID], "listed twice: %s", sum.ID)
		seen[sum.ID] = true
	}

	count := func(q job.ListQuery, want int, check func(job.Summary) bool) {
		t.Helper()
		got := listAll(t, s.store, q)
		assert.Len(t, got, want, "%+v", q)
		for _, sum := range got {
			assert.True(t, check(sum), "%+v does not match %+v", sum, q)
		}
	}
	count(job.ListQuery{Tenant: "dev", State: job.StateFailed, Limit: 4}, 15, func(s job.Summary) bool { return s.State == job.StateFailed })
	count(job.ListQuery{Tenant: "dev", Reason: job.ReasonOOM}, 15, func(s job.Summary) bool { return s.Reason == job.ReasonOOM })
	count(job.ListQuery{Tenant: "dev", State: job.StateQueued}, 45, func(s job.Summary) bool { return s.State == job.StateQueued })
	count(job.ListQuery{Tenant: "dev", Queue: "batch", Limit: 3}, 20, func(s job.Summary) bool { return s.Queue == "batch" })
	count(job.ListQuery{Tenant: "dev", Label: "team=b"}, 12, func(s job.Summary) bool { return s.Labels["team"] == "b" })
	count(job.ListQuery{Tenant: "dev", Label: "x"}, 12, func(s job.Summary) bool { return s.Labels["x"] == "1" })
	count(job.ListQuery{Tenant: "dev", IDPrefix: "j-00001"}, 10, func(s job.Summary) bool { return strings.HasPrefix(s.ID, "j-00001") })
	count(job.ListQuery{Tenant: "dev", Queue: "batch", Label: "team=b"}, 4, func(s job.Summary) bool { return s.Queue == "batch" && s.Labels["team"] == "b" })
	count(job.ListQuery{Tenant: "other"}, 7, func(s job.Summary) bool { return s.Tenant == "other" })
	count(job.ListQuery{Limit: 9}, 67, func(job.Summary) bool { return true })
	count(job.ListQuery{Tenant: "nobody"}, 0, nil)

	_, err := s.store.List(ctx, job.ListQuery{Tenant: "dev", Cursor: "not-a-cursor"})
	assert.ErrorIs(t, err, results.ErrBadCursor)
	_, err = s.store.List(ctx, job.ListQuery{Tenant: "dev", Limit: 500})
	assert.Error(t, err)
	_, err = s.store.List(ctx, job.ListQuery{Tenant: "dev", State: "sleeping"})
	assert.Error(t, err)
}

// Jobs queued in the same millisecond are all listed across page
// boundaries (the cursor carries the member, not only the score).
func TestListCursorTies(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	at := time.Now()
	for i := range 25 {
		require.NoError(t, s.store.Queued(context.Background(), spec("dev", fmt.Sprintf("tie-%02d", i)), at))
	}
	got := listAll(t, s.store, job.ListQuery{Tenant: "dev", Limit: 4})
	require.Len(t, got, 25)
	seen := map[string]bool{}
	for _, sum := range got {
		seen[sum.ID] = true
	}
	assert.Len(t, seen, 25)
}

// A filter that matches nothing in the newest ListScanBudget entries gives
// a short page with a cursor, and the cursor goes on to the match.
func TestListScanBudget(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	n := results.ListScanBudget + 500
	fillIndex(t, s.store, "dev", "b", n, func(i int, sp *job.Spec) {
		if i == 10 {
			sp.Queue = "rare"
		}
	})
	page, err := s.store.List(context.Background(), job.ListQuery{Tenant: "dev", Queue: "rare"})
	require.NoError(t, err)
	assert.Empty(t, page.Jobs)
	require.NotEmpty(t, page.NextCursor, "a page cut by the scan budget says where to go on")
	page, err = s.store.List(context.Background(), job.ListQuery{Tenant: "dev", Queue: "rare", Cursor: page.NextCursor})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	assert.Equal(t, "b-000010", page.Jobs[0].ID)
	assert.Empty(t, page.NextCursor)
}

// Changes returns the summaries updated at or after a time, oldest change
// first, per tenant.
func TestChanges(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	for _, id := range []string{"c1", "c2", "c3"} {
		require.NoError(t, s.store.Queued(ctx, spec("dev", id), time.Now()))
	}
	require.NoError(t, s.store.Queued(ctx, spec("other", "o1"), time.Now()))
	ch, err := s.store.Changes(ctx, "dev", time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, ch, 3)
	assert.Equal(t, []string{"c1", "c2", "c3"}, []string{ch[0].ID, ch[1].ID, ch[2].ID})
	since := ch[2].UpdatedAt

	_, err = s.store.BeginRun(ctx, job.Key("dev", "c1"))
	require.NoError(t, err)
	ch, err = s.store.Changes(ctx, "dev", since.Add(time.Microsecond), 0)
	require.NoError(t, err)
	require.Len(t, ch, 1)
	assert.Equal(t, "c1", ch[0].ID)
	assert.Equal(t, job.StateRunning, ch[0].State)

	ch, err = s.store.Changes(ctx, "dev", time.Time{}, 2)
	require.NoError(t, err)
	assert.Len(t, ch, 2, "limit")
	ch, err = s.store.Changes(ctx, "", time.Time{}, 0)
	require.NoError(t, err)
	assert.Len(t, ch, 4, "every tenant's")
}

// Entries older than the retention are trimmed, and once the jobs ended
// every index key expires within the retention.
func TestIndexRetention(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	st := results.NewStore(s.rdb, s.js, results.StoreConfig{KeyPrefix: s.prefix, Retention: time.Hour})
	require.NoError(t, st.Queued(ctx, spec("dev", "old"), time.Now().Add(-2*time.Hour)))
	require.NoError(t, st.Queued(ctx, spec("dev", "new"), time.Now()))
	page, err := st.List(ctx, job.ListQuery{Tenant: "dev"})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	assert.Equal(t, "new", page.Jobs[0].ID)
	// The jobs end: a final write gives the sets their TTL (a queued write
	// leaves that to it).
	for _, id := range []string{"old", "new"} {
		r := job.Result{ID: id, Tenant: "dev"}
		r.Finish(job.ReasonOK)
		_, _, err := st.Record(ctx, r)
		require.NoError(t, err)
	}
	keys, err := s.rdb.Keys(ctx, s.prefix+"idx*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		ttl, err := s.rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.True(t, ttl > 0 && ttl <= 2*time.Hour, "%s has TTL %s", k, ttl)
	}
}

// The sorted sets are trimmed at most once a second per tenant, not on
// every write: an entry that ages past the retention leaves them at a
// later final write, and every set keeps a TTL throughout.
func TestIndexTrimsLater(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	ret := 3 * time.Second
	st := results.NewStore(s.rdb, s.js, results.StoreConfig{KeyPrefix: s.prefix, Retention: ret})
	require.NoError(t, st.Queued(ctx, spec("dev", "ageing"), time.Now().Add(-ret+time.Second)))
	queued := s.prefix + "idx{idx}:t:dev:q"
	_, err := s.rdb.ZScore(ctx, queued, "dev/ageing").Result()
	require.NoError(t, err, "an entry within the retention is indexed")
	n := 0
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	trimmed := testsvc.Poll(pctx, 100*time.Millisecond, func() bool {
		n++
		// Final writes trim (a queued or running write never does).
		r := job.Result{ID: fmt.Sprintf("w%d", n), Tenant: "dev"}
		r.Finish(job.ReasonOK)
		_, _, err := st.Record(ctx, r)
		require.NoError(t, err)
		for _, k := range []string{queued, s.prefix + "idx{idx}:all:q", s.prefix + "idx{idx}:t:dev:u", s.prefix + "idx{idx}:all:u"} {
			ttl, err := s.rdb.PTTL(ctx, k).Result()
			require.NoError(t, err)
			require.True(t, ttl > 0 && ttl <= ret+time.Second, "%s has TTL %s", k, ttl)
		}
		_, err = s.rdb.ZScore(ctx, queued, "dev/ageing").Result()
		return errors.Is(err, redis.Nil)
	})
	require.True(t, trimmed, "the aged entry was never trimmed from %s (%d writes)", queued, n)
}

// Reasons counts the jobs that ended, by reason, once each.
func TestReasons(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	for i, reason := range []job.Reason{job.ReasonOOM, job.ReasonOOM, job.ReasonOK} {
		r := job.Result{ID: fmt.Sprintf("r%d", i), Tenant: "dev"}
		r.Finish(reason)
		_, _, err := s.store.Record(ctx, r)
		require.NoError(t, err)
		_, _, err = s.store.Record(ctx, r) // a repeat does not count again
		require.NoError(t, err)
	}
	rc, err := s.store.Reasons(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	total := map[string]int{}
	for _, b := range rc {
		for k, v := range b.Counts {
			total[k] += v
		}
	}
	assert.Equal(t, map[string]int{"oom": 2, "ok": 1}, total)
}

// BenchmarkList100k fills the index with 100,000 jobs (100 of them
// succeeded) and measures one page per query: the newest 50 and 200, a
// state filter, a filter that matches nothing (the whole scan budget), and
// every tenant's.
func BenchmarkList100k(b *testing.B) {
	s := newSetup(b)
	ctx := context.Background()
	const n = 100_000
	start := time.Now()
	fillIndex(b, s.store, "dev", "k", n, nil)
	b.Logf("filled %d entries in %s", n, time.Since(start))
	for i := 0; i < 200; i += 2 {
		r := job.Result{ID: fmt.Sprintf("k-%06d", n-1-i), Tenant: "dev"}
		r.Finish(job.ReasonOK)
		_, _, err := s.store.Record(ctx, r)
		require.NoError(b, err)
	}
	for _, bc := range []struct {
		name string
		q    job.ListQuery
	}{
		{"newest50", job.ListQuery{Tenant: "dev", Limit: 50}},
		{"newest200", job.ListQuery{Tenant: "dev", Limit: 200}},
		{"state", job.ListQuery{Tenant: "dev", State: job.StateSucceeded, Limit: 50}},
		{"nomatch", job.ListQuery{Tenant: "dev", Queue: "none", Limit: 50}},
		{"alltenants", job.ListQuery{Limit: 50}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.store.List(ctx, bc.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("changes200", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.store.Changes(ctx, "dev", time.Now().Add(-time.Second), 200); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The index is a view: when its write fails (here the job's index key holds
// a string, so the script fails with WRONGTYPE), the job's own writes
// still succeed.
func TestIndexFailureDoesNotFailWrites(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	require.NoError(t, s.rdb.Set(ctx, s.prefix+"idx{idx}:job:dev/broken", "not a hash", time.Hour).Err())
	sp := spec("dev", "broken")
	require.NoError(t, s.store.Queued(ctx, sp, time.Now()))
	run, err := s.store.BeginRun(ctx, sp.Key())
	require.NoError(t, err)
	assert.Equal(t, 1, run)
	r := job.Result{ID: "broken", Tenant: "dev"}
	r.Finish(job.ReasonOK)
	stored, first, err := s.store.Record(ctx, r)
	require.NoError(t, err)
	assert.True(t, first)
	assert.Equal(t, job.StateSucceeded, stored.State)
}
