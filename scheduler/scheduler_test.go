package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for name, mod := range map[string]func(*scheduler.Config){
		"negative concurrency": func(c *scheduler.Config) { c.Concurrency = -1 },
		"ack wait too short":   func(c *scheduler.Config) { c.AckWait = 10 * time.Millisecond },
		"consumer with a dot":  func(c *scheduler.Config) { c.Consumer = "a.b" },
		"backoff range":        func(c *scheduler.Config) { c.BackoffMin, c.BackoffMax = time.Second, time.Millisecond },
		"negative retention":   func(c *scheduler.Config) { c.TaskRetention = -time.Hour },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			mod(&cfg)
			_, err := scheduler.New(s.js, s.enq, s.store, cfg)
			require.ErrorIs(t, err, scheduler.ErrConfig)
		})
	}
	_, err := scheduler.New(s.js, nil, s.store, testConfig())
	require.ErrorIs(t, err, scheduler.ErrConfig)
}

func TestStartWithoutStreams(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	nc, err := nats.Connect(n.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r := testsvc.StartRedis(t)
	rdb := r.Client()
	t.Cleanup(func() { rdb.Close() })
	sch, err := scheduler.New(js, newCounting(nil), results.NewStore(rdb, js, results.StoreConfig{}), testConfig())
	require.NoError(t, err)
	err = sch.Start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "EnsureStreams")
	sch.Stop() // a no-op
}

// Start and Stop are idempotent and the service is restartable; a job
// submitted during each lifetime is scheduled.
func TestStartStopRepeatedly(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	sch, err := scheduler.New(s.js, s.enq, s.rec, testConfig())
	require.NoError(t, err)
	sch.Stop() // before any Start
	for i := range 5 {
		require.NoError(t, sch.Start(context.Background()))
		require.NoError(t, sch.Start(context.Background()), "Start on a started scheduler")
		id := s.submit(job.Spec{Command: fmt.Sprintf("echo %d", i)})
		s.task("default", id)
		sch.Stop()
		sch.Stop()
	}
	// Enqueued jobs' messages stay in the stream, unacknowledged, until
	// the jobs have results (no worker runs here): a stopped scheduler
	// leaves them for the next one, which finds them enqueued already.
	assert.EqualValues(t, 5, s.jobsInStream())
	assert.Equal(t, 5, s.enq.total())

	// Canceling Start's ctx stops it; Start works again afterwards.
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, sch.Start(ctx))
	cancel()
	require.NoError(t, sch.Start(context.Background()))
	id := s.submit(job.Spec{Command: "echo after ctx"})
	s.task("default", id)
	sch.Stop()
}

// Submissions waiting in JetStream survive a scheduler going away: 200
// submitted, one scheduler stopped part-way, a new one finishes; every job
// is enqueued exactly once.
func TestRestartLosesNothing(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	specs := make([]job.Spec, 200)
	for i := range specs {
		specs[i] = job.Spec{Command: fmt.Sprintf("echo %d", i)}
	}
	subs, err := s.client.SubmitBatch(context.Background(), specs, nil)
	require.NoError(t, err)
	require.EqualValues(t, 200, s.jobsInStream())

	cfg := testConfig()
	cfg.Concurrency = 2
	first, err := scheduler.New(s.js, s.enq, s.rec, cfg)
	require.NoError(t, err)
	require.NoError(t, first.Start(context.Background()))
	require.Eventually(t, func() bool { return s.enq.total() >= 50 }, wait, time.Millisecond)
	first.Stop()
	require.Less(t, s.enq.total(), 200, "stopped part-way")

	s.scheduler(s.enq, cfg) // a new process
	require.Eventually(t, func() bool { return len(s.pending("default")) == 200 }, wait, 10*time.Millisecond)
	s.drained()
	for _, sub := range subs {
		assert.Equal(t, 1, s.enq.successes(sub.ID), "job %s enqueued once", sub.ID)
	}
	assert.Equal(t, 200, s.enq.total())
}

// With Redis down nothing is acked, nothing is recorded as `infra` (even
// past MaxDeliver), and everything is enqueued once Redis is back.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	cfg := testConfig()
	cfg.MaxDeliver = 2
	sch := s.scheduler(s.enq, cfg)

	s.redis.Stop()
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = s.submit(job.Spec{Command: fmt.Sprintf("echo %d", i)})
	}
	// Each message has failed more than MaxDeliver times.
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if s.rec.failures(id) <= cfg.MaxDeliver {
				return false
			}
		}
		return true
	}, wait, 10*time.Millisecond)
	assert.EqualValues(t, 20, s.jobsInStream(), "nothing acked while Redis is down")

	// A restart during the outage changes nothing.
	sch.Stop()
	require.NoError(t, sch.Start(context.Background()))

	s.redis.Restart()
	require.Eventually(t, func() bool { return len(s.pending("default")) == 20 }, wait, 10*time.Millisecond)
	s.drained()
	for _, id := range ids {
		assert.Equal(t, 1, s.enq.successes(id))
		_, err := s.store.Get(context.Background(), taskKey(id))
		assert.ErrorIs(t, err, results.ErrNotFound, "no infra result for %s", id)
	}
}

// Two schedulers on the shared consumer split the work and never enqueue a
// job twice.
func TestTwoSchedulersShareWork(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	cfg := testConfig()
	cfg.Concurrency = 2
	a, b := newCounting(s.asynq), newCounting(s.asynq)
	s.scheduler(a, cfg)
	s.scheduler(b, cfg)

	specs := make([]job.Spec, 300)
	for i := range specs {
		specs[i] = job.Spec{Command: fmt.Sprintf("echo %d", i)}
	}
	subs, err := s.client.SubmitBatch(context.Background(), specs, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(s.pending("default")) == 300 }, wait, 10*time.Millisecond)
	s.drained()
	for _, sub := range subs {
		assert.Equal(t, 1, a.successes(sub.ID)+b.successes(sub.ID), "job %s", sub.ID)
	}
	assert.Positive(t, a.total(), "scheduler a took work")
	assert.Positive(t, b.total(), "scheduler b took work")
	assert.Equal(t, 300, a.total()+b.total())
}

// Stop returns while Redis is down and messages are failing; they stay for
// redelivery.
func TestStopDuringOutage(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	cfg := testConfig()
	cfg.ShutdownTimeout = 200 * time.Millisecond
	sch := s.scheduler(s.enq, cfg)
	s.redis.Stop()
	for i := range 10 {
		s.submit(job.Spec{Command: fmt.Sprintf("echo %d", i)})
	}
	require.Eventually(t, func() bool { return s.rec.allFailures() >= 10 }, wait, 10*time.Millisecond)
	sch.Stop()
	assert.EqualValues(t, 10, s.jobsInStream())
}

// The scheduler keeps consuming across a NATS server restart (the durable
// consumer and the submissions are on disk).
func TestNATSRestart(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, testConfig())
	s.task("default", s.submit(job.Spec{Command: "echo before"}))
	s.nats.Restart()
	require.Eventually(t, s.nc.IsConnected, wait, 10*time.Millisecond)
	var id string
	require.Eventually(t, func() bool {
		sub, err := s.client.Submit(context.Background(), job.Spec{ID: "after-restart", Command: "echo after"})
		id = sub.ID
		return err == nil // JetStream may need a moment after the restart
	}, wait, 50*time.Millisecond)
	s.task("default", id)
	s.drained()
}
