package faulttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// cli runs a one-shot paddock command against the fleet.
func (f *fleet) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.paddock, args...)
	cmd.Env = append(childEnv(), "PADDOCK_NATS_URL="+f.nats.URL, "PADDOCK_REDIS_URL=unix://"+f.redis.Addr)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestCLICancelDelayPeriodic drives the operator commands: a delayed job
// (submit --in) does not start early; another waits in the queue and
// `paddock cancel` removes it; a
// running job is killed by `paddock cancel`; a scheduler with
// --schedule-file runs an "@every 2s" job once per tick.
func TestCLICancelDelayPeriodic(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	sched := filepath.Join(f.dir, "schedule.jsonl")
	require.NoError(t, os.WriteFile(sched, []byte(`{"name": "beat", "cron": "@every 2s", "spec": {"command": "echo beat"}}`+"\n"), 0o600))
	f.scheduler("s1", "--schedule-file", sched)
	f.scheduler("s2", "--schedule-file", sched)
	w := f.worker("w1")

	delayed := testsvc.Unique("later")
	out, err := f.cli("submit", "--id", delayed, "--in", "1h", "--", "echo later")
	require.NoError(t, err, out)
	f.waitFor(30*time.Second, "the delayed task", func() bool {
		st, _, err := f.taskState(delayed)
		return err == nil && st == asynq.TaskStateScheduled
	})
	soon := testsvc.Unique("soon")
	t0 := time.Now()
	out, err = f.cli("submit", "--id", soon, "--in", "3s", "--", "echo soon")
	require.NoError(t, err, out)
	running := testsvc.Unique("running")
	_, err = f.cli("submit", "--id", running, "--", "sleep 120; : "+running)
	require.NoError(t, err)
	f.waitRunning(w.id, running, time.Minute)

	out, err = f.cli("cancel", delayed, running)
	require.NoError(t, err, out)
	assert.Contains(t, out, delayed+"\tcanceled\t")
	assert.Contains(t, out, running+"\tkilling\t")
	for _, id := range []string{delayed, running} {
		r := f.result(id, time.Minute)
		assert.Equal(t, job.StateCanceled, r.State, id)
	}
	assert.Zero(t, f.runs(delayed))
	out, err = f.cli("cancel", delayed)
	require.NoError(t, err, out)
	assert.Contains(t, out, delayed+"\tfinished\t")

	r := f.result(soon, time.Minute)
	assert.Equal(t, "soon\n", r.Stdout.Text)
	assert.False(t, r.StartedAt.Before(t0.Add(3*time.Second)), "a job submitted --in 3s started at %s", r.StartedAt.Sub(t0))
	t.Logf("--in 3s job started %s after submission", r.StartedAt.Sub(t0).Round(time.Millisecond))

	// Periodic: ticks run once each although two schedulers submit them.
	var ticks []string
	f.waitFor(time.Minute, "three periodic runs", func() bool {
		keys, err := f.rdb.Keys(context.Background(), "paddock:result:default/beat-*").Result()
		ticks = keys
		return err == nil && len(keys) >= 3
	})
	for _, k := range ticks {
		id := strings.TrimPrefix(k, "paddock:result:default/")
		sec, err := strconv.ParseInt(strings.TrimPrefix(id, "beat-"), 10, 64)
		require.NoError(t, err)
		assert.Zero(t, sec%2, "tick %s is aligned to the 2 s period", id)
		r := f.result(id, time.Minute)
		assert.Equal(t, "beat\n", r.Stdout.Text)
		assert.Equal(t, 1, r.Runs)
	}
}
