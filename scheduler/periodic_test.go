package scheduler_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
)

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	good := `# nightly and frequent jobs
{"name": "nightly", "cron": "0 3 * * *", "spec": {"command": "make nightly", "queue": "low"}}

{"name": "tick.5s", "cron": "@every 5s", "spec": {"command": "echo tick"}}
{"name": "berlin", "cron": "CRON_TZ=Europe/Berlin 30 8 * * 1-5", "spec": {"command": "date"}}
{"name": "hourly", "cron": "@hourly", "spec": {"command": "true"}}`
	es, err := scheduler.ParseSchedule(strings.NewReader(good))
	require.NoError(t, err)
	require.Len(t, es, 4)
	assert.Equal(t, "nightly", es[0].Name)
	assert.Equal(t, "low", es[0].Spec.Queue)
	tick := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	assert.Equal(t, "nightly-"+strconv.FormatInt(tick.Unix(), 10), es[0].ID(tick))

	for _, tc := range []struct{ name, line, want string }{
		{"no name", `{"cron": "@hourly", "spec": {"command": "x"}}`, "name"},
		{"bad name", `{"name": "a b", "cron": "@hourly", "spec": {"command": "x"}}`, "name"},
		{"bad cron", `{"name": "a", "cron": "61 * * * *", "spec": {"command": "x"}}`, "cron"},
		{"six fields", `{"name": "a", "cron": "0 0 * * * *", "spec": {"command": "x"}}`, "cron"},
		{"fractional every", `{"name": "a", "cron": "@every 1500ms", "spec": {"command": "x"}}`, "whole seconds"},
		{"no spec", `{"name": "a", "cron": "@hourly"}`, "spec is missing"},
		{"spec with id", `{"name": "a", "cron": "@hourly", "spec": {"id": "x", "command": "x"}}`, "must not have an id"},
		{"bad spec", `{"name": "a", "cron": "@hourly", "spec": {"Command": "x"}}`, "spec"},
		{"unknown field", `{"name": "a", "cron": "@hourly", "spec": {"command": "x"}, "tz": "UTC"}`, "unknown field"},
		{"not json", `name=a`, "want {"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scheduler.ParseSchedule(strings.NewReader("\n" + tc.line))
			require.ErrorIs(t, err, scheduler.ErrSchedule)
			assert.Contains(t, err.Error(), "line 2: ")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = scheduler.ParseSchedule(strings.NewReader(`{"name": "a", "cron": "@hourly", "spec": {"command": "x"}}
{"name": "a", "cron": "@daily", "spec": {"command": "y"}}`))
	assert.ErrorContains(t, err, `line 2: name "a" is already used on line 1`)
}

// TestPeriodicOncePerTick: three tickers (one per scheduler process in a
// real fleet) and two schedulers submit an "@every 1s" job: every tick is
// enqueued exactly once, under the id <name>-<tick>.
func TestPeriodicOncePerTick(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, testConfig())
	s.scheduler(s.enq, testConfig())
	es, err := scheduler.ParseSchedule(strings.NewReader(`{"name": "beat", "cron": "@every 1s", "spec": {"command": "echo beat"}}`))
	require.NoError(t, err)
	var tickers []*scheduler.Ticker
	for range 3 {
		tk, err := scheduler.NewTicker(s.js, es, scheduler.PeriodicConfig{Logger: quiet()})
		require.NoError(t, err)
		require.NoError(t, tk.Start(context.Background()))
		require.NoError(t, tk.Start(context.Background())) // idempotent
		tickers = append(tickers, tk)
	}
	require.Eventually(t, func() bool { return len(s.pending(job.DefaultQueue)) >= 3 }, wait, 50*time.Millisecond, "3 ticks enqueued")
	var wg sync.WaitGroup
	for _, tk := range tickers {
		wg.Go(func() { tk.Stop(); tk.Stop() })
	}
	wg.Wait()
	s.drained()

	ids := s.pending(job.DefaultQueue)
	require.GreaterOrEqual(t, len(ids), 3, "ticks")
	seen := map[string]bool{}
	for _, id := range ids {
		assert.False(t, seen[id], "tick %s enqueued twice", id)
		seen[id] = true
		sec, err := strconv.ParseInt(strings.TrimPrefix(id, "beat-"), 10, 64)
		require.NoError(t, err, id)
		assert.Equal(t, 1, s.enq.successes(id))
		info := s.task(job.DefaultQueue, id)
		assert.Equal(t, asynq.TaskStatePending, info.State)
		spec, err := job.Decode(info.Payload)
		require.NoError(t, err)
		assert.Equal(t, time.Unix(sec, 0).UTC(), spec.SubmittedAt, "submitted_at is the tick")
	}
	assert.Equal(t, len(ids), s.enq.total())
}

func TestTickerStartStop(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	es, err := scheduler.ParseSchedule(strings.NewReader(`{"name": "x", "cron": "@hourly", "spec": {"command": "true"}}`))
	require.NoError(t, err)
	tk, err := scheduler.NewTicker(s.js, es, scheduler.PeriodicConfig{Logger: quiet()})
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, tk.Start(context.Background()))
		tk.Stop()
	}
	tk.Stop()
	_, err = scheduler.NewTicker(s.js, []scheduler.Periodic{{Name: "hand-made"}}, scheduler.PeriodicConfig{})
	assert.ErrorIs(t, err, scheduler.ErrConfig)
}
