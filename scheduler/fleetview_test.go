package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

// The fleet view of tenant dev, read from a real Redis next to another
// tenant's activity: a real worker heartbeat (its id is a host name), a
// running asynq server (host, pid), the other tenant's jobs in a queue of
// its own name, ended oom. Dev sees its own jobs by queue and its own
// reasons; of the fleet only the anonymous workers and capacity: no host
// name, worker id, pid, other tenant's name, queue or count.
func TestAttackFleetViewShowsOnlyOwn(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	host, err := os.Hostname()
	require.NoError(t, err)

	hb := worker.NewHeartbeat(s.rdb, "w-"+host, "paddock:", 30*time.Second)
	require.NoError(t, hb.Start(ctx))
	t.Cleanup(hb.Stop)
	srv := asynq.NewServerFromRedisClient(s.rdb, asynq.Config{Concurrency: 3, Queues: map[string]int{"beta-private": 1}, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
	t.Cleanup(srv.Shutdown)
	_, err = s.asynq.Enqueue(asynq.NewTask(job.TaskType, nil), asynq.Queue("beta-idle"), asynq.TaskID("betacorp/beta-secret"))
	require.NoError(t, err)

	for _, tn := range []string{"dev", "betacorp"} {
		require.NoError(t, results.EnsureTenant(ctx, s.js, results.StreamConfig{}, tn, 0, 0))
	}
	st := s.store
	require.NoError(t, st.Queued(ctx, job.Spec{ID: "dev-job", Tenant: "dev", Command: "x", Queue: "default"}, time.Now()))
	for i := range 7 { // the other tenant's jobs, ended oom, in its own queue
		id := fmt.Sprintf("beta-secret-%d", i)
		require.NoError(t, st.Queued(ctx, job.Spec{ID: id, Tenant: "betacorp", Command: "x", Queue: "beta-private"}, time.Now()))
		_, _, err := st.Record(ctx, job.Result{V: 1, ID: id, Tenant: "betacorp", State: job.StateFailed, Reason: job.ReasonOOM,
			Queue: "beta-private", FinishedAt: time.Now()})
		require.NoError(t, err)
	}
	require.NoError(t, st.Queued(ctx, job.Spec{ID: "dev-done", Tenant: "dev", Command: "x", Queue: "default"}, time.Now()))
	_, _, err = st.Record(ctx, job.Result{V: 1, ID: "dev-done", Tenant: "dev", State: job.StateSucceeded, Reason: job.ReasonOK,
		Queue: "default", FinishedAt: time.Now()})
	require.NoError(t, err)
	fv, err := scheduler.NewFleetView(s.rdb, st, scheduler.FleetViewConfig{})
	require.NoError(t, err)

	var body scheduler.Fleet
	require.Eventually(t, func() bool {
		body, err = fv.Read(ctx, "dev")
		require.NoError(t, err)
		return body.Capacity.Slots == 3
	}, wait, 50*time.Millisecond, "the asynq server registers")
	data, err := json.Marshal(body)
	require.NoError(t, err)
	text := string(data)
	t.Logf("dev's fleet view: %s", text)
	for _, secret := range []string{"betacorp", "beta-", "oom", host, "w-", strconv.Itoa(os.Getpid())} {
		assert.NotContains(t, text, secret, "dev's fleet view shows no other tenant, queue, count or host")
	}
	assert.Equal(t, "dev", body.Tenant)
	require.Len(t, body.Workers, 1)
	assert.True(t, body.Workers[0].Alive)
	assert.Equal(t, scheduler.FleetCapacity{WorkersAlive: 1, Slots: 3}, body.Capacity)
	assert.Equal(t, []scheduler.FleetQueue{{Name: "default", Queued: 1, EndedLastHour: 1}}, body.Queues)
	require.Len(t, body.Reasons, 1)
	assert.Equal(t, map[string]int{"ok": 1}, body.Reasons[0].Counts, "only dev's own reasons")
	assert.False(t, body.Partial)

	// betacorp sees its own, not dev's.
	beta, err := fv.Read(ctx, "betacorp")
	require.NoError(t, err)
	data, _ = json.Marshal(beta)
	assert.NotContains(t, string(data), "dev")
	assert.Equal(t, []scheduler.FleetQueue{{Name: "beta-private", EndedLastHour: 7, FailedLastHr: 7}}, beta.Queues)

	hb.Stop()
	body, err = fv.Read(ctx, "dev")
	require.NoError(t, err)
	require.Len(t, body.Workers, 1)
	assert.False(t, body.Workers[0].Alive, "a stopped worker is known but not alive")
	assert.Zero(t, body.Capacity.WorkersAlive)
}

// The view reads the heartbeats under the workers' key prefix only, and
// an empty fleet is empty lists (JSON arrays), not nulls.
func TestFleetViewKeyPrefix(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	hb := worker.NewHeartbeat(s.rdb, "w-other", "elsewhere:", 30*time.Second)
	require.NoError(t, hb.Start(ctx))
	t.Cleanup(hb.Stop)

	fv, err := scheduler.NewFleetView(s.rdb, s.store, scheduler.FleetViewConfig{})
	require.NoError(t, err)
	body, err := fv.Read(ctx, "dev")
	require.NoError(t, err)
	data, err := json.Marshal(body)
	require.NoError(t, err)
	assert.JSONEq(t, `{"tenant":"dev","workers":[],"capacity":{"workers_alive":0,"slots":0},"queues":[],"reasons":[]}`, string(data))

	fv, err = scheduler.NewFleetView(s.rdb, s.store, scheduler.FleetViewConfig{KeyPrefix: "elsewhere:"})
	require.NoError(t, err)
	body, err = fv.Read(ctx, "dev")
	require.NoError(t, err)
	require.Len(t, body.Workers, 1)
	assert.True(t, body.Workers[0].Alive)

	_, err = scheduler.NewFleetView(nil, s.store, scheduler.FleetViewConfig{})
	assert.ErrorIs(t, err, scheduler.ErrConfig)
}
