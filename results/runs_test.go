package results_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBeginRunCounts(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	for want := 1; want <= 3; want++ {
		n, err := s.store.BeginRun(ctx, "runs-1")
		require.NoError(t, err)
		assert.Equal(t, want, n)
		ttl, err := s.rdb.PTTL(ctx, s.prefix+"runs:runs-1").Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, time.Minute, "start %d did not renew the counter's retention", want)
		// Shorten it: the next start has to renew it.
		require.NoError(t, s.rdb.PExpire(ctx, s.prefix+"runs:runs-1", time.Second).Err())
	}
	n, err := s.store.BeginRun(ctx, "runs-2")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

// TestBeginRunAsNotesTheRunUntilEndRun: a worker's run is noted in its
// active set (<prefix>active:<worker>, "run|task|queue", the worker in
// <prefix>active) until EndRun; a task that no longer carries the job
// (<prefix>task:<key> names another) is refused with ErrStaleTask and
// counts nothing.
func TestBeginRunAsNotesTheRunUntilEndRun(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	key := job.Key("", "ra-1")
	n, err := s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w1", TaskID: key, Queue: "q"})
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, "1|"+key+"|q", s.rdb.HGet(ctx, s.prefix+"active:w1", key).Val())
	assert.True(t, s.rdb.SIsMember(ctx, s.prefix+"active", "w1").Val())

	require.NoError(t, s.store.EndRun(ctx, "w1", key, 2))
	assert.True(t, s.rdb.HExists(ctx, s.prefix+"active:w1", key).Val(), "the end of run 2 removed run 1's entry")
	require.NoError(t, s.store.EndRun(ctx, "w1", key, 1))
	assert.False(t, s.rdb.HExists(ctx, s.prefix+"active:w1", key).Val(), "the run stays noted after EndRun")

	require.NoError(t, s.rdb.Set(ctx, s.prefix+"task:"+key, key+"#rescue-1", time.Minute).Err())
	_, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w1", TaskID: key, Queue: "q"})
	require.ErrorIs(t, err, results.ErrStaleTask)
	assert.Equal(t, "1", s.rdb.Get(ctx, s.prefix+"runs:"+key).Val(), "a stale task counted a run")
	n, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w2", TaskID: key + "#rescue-1", Queue: "q"})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

// TestRecordRunIsFencedByTheRunToken: RecordRun stores the result of run n
// of task t only while t carries the job and no run began since; a token
// without a run is invalid. Record (no run) is not fenced.
func TestRecordRunIsFencedByTheRunToken(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	id := "rr-1"
	key := job.Key("", id)
	_, _, err := s.store.RecordRun(ctx, okResult(id), results.RunToken{})
	require.ErrorIs(t, err, results.ErrInvalid)
	n, err := s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w1", TaskID: key, Queue: "q"})
	require.NoError(t, err)
	// Run 1 was taken up again by the same task (asynq's recoverer after a
	// lost lease): run 1 is stale.
	_, err = s.store.BeginRunAs(ctx, key, results.RunOwner{Worker: "w2", TaskID: key, Queue: "q"})
	require.NoError(t, err)
	_, _, err = s.store.RecordRun(ctx, okResult(id), results.RunToken{Run: n})
	require.ErrorIs(t, err, results.ErrStaleRun, "a run started again since recorded")
	_, _, err = s.store.RecordRun(ctx, okResult(id), results.RunToken{Run: n + 1, TaskID: key + "#rescue-1"})
	require.ErrorIs(t, err, results.ErrStaleRun, "a task that does not carry the job recorded")
	_, err = s.store.Get(ctx, key)
	require.ErrorIs(t, err, results.ErrNotFound)
	_, first, err := s.store.RecordRun(ctx, okResult(id), results.RunToken{Run: n + 1})
	require.NoError(t, err)
	assert.True(t, first, "the current run records")

	// A counter lost (or set back) by a Redis failover is no evidence of a
	// newer run: the run records rather than leave the job without a result.
	for i, lose := range []func(k string) error{
		func(k string) error { return s.rdb.Del(ctx, k).Err() },
		func(k string) error { return s.rdb.Set(ctx, k, "1", time.Hour).Err() },
	} {
		lost := job.Key("", fmt.Sprintf("rr-lost-%d", i))
		for range 2 {
			_, err := s.store.BeginRunAs(ctx, lost, results.RunOwner{Worker: "w1", TaskID: lost, Queue: "q"})
			require.NoError(t, err)
		}
		require.NoError(t, lose(s.prefix+"runs:"+lost))
		_, tenantID, _ := job.SplitKey(lost)
		_, first, err := s.store.RecordRun(ctx, okResult(tenantID), results.RunToken{Run: 2})
		require.NoError(t, err, "case %d", i)
		assert.True(t, first, "case %d", i)
	}
}

// TestBeginRunRejoinsTheActiveSet: a rescuer's scan drops a worker whose
// active hash is empty from <prefix>active (the hash itself is gone); the
// worker's next run puts it back and gives both keys a TTL, so a rescuer
// finds every noted run. A run beside another one leaves them as they are.
func TestBeginRunRejoinsTheActiveSet(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	owner := results.RunOwner{Worker: "w1", Queue: "q"}
	a, b, c := job.Key("", "rj-a"), job.Key("", "rj-b"), job.Key("", "rj-c")
	_, err := s.store.BeginRunAs(ctx, a, owner)
	require.NoError(t, err)
	require.NoError(t, s.store.EndRun(ctx, "w1", a, 0))
	require.Zero(t, s.rdb.Exists(ctx, s.prefix+"active:w1").Val(), "the emptied hash is gone")
	require.NoError(t, s.rdb.SRem(ctx, s.prefix+"active", "w1").Err()) // as rescue_scan.lua does

	_, err = s.store.BeginRunAs(ctx, b, owner)
	require.NoError(t, err)
	assert.True(t, s.rdb.SIsMember(ctx, s.prefix+"active", "w1").Val(), "the worker's run is noted where no rescuer looks")
	for _, k := range []string{s.prefix + "active:w1", s.prefix + "active"} {
		ttl, err := s.rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "%s has no TTL", k)
	}
	_, err = s.store.BeginRunAs(ctx, c, owner)
	require.NoError(t, err)
	assert.Equal(t, int64(2), s.rdb.HLen(ctx, s.prefix+"active:w1").Val())
}
