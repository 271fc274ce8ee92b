package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
)

// finish records a succeeded result for tenant's job id, as a worker would.
func (s *setup) finish(tenant, id string) {
	s.t.Helper()
	r := job.Result{ID: id, Tenant: tenant, FinishedAt: time.Now().UTC()}
	r.Finish(job.ReasonOK)
	_, _, err := s.store.Record(context.Background(), r)
	require.NoError(s.t, err)
}

// taskOf polls until tenant's job id is a task in the default queue.
func (s *setup) taskOf(tenant, id string) {
	s.t.Helper()
	s.task("default", job.Key(tenant, id))
}

func (s *setup) hasTask(tenant, id string) bool {
	_, err := s.insp.GetTaskInfo("default", job.Key(tenant, id))
	return err == nil
}

// consumer is the scheduler consumer's state on tenant's stream.
func (s *setup) consumer(tenant string) *jetstream.ConsumerInfo {
	s.t.Helper()
	c, err := s.js.Consumer(context.Background(), job.JobsStream(tenant), job.ConsumerSchedulers)
	require.NoError(s.t, err)
	info, err := c.Info(context.Background())
	require.NoError(s.t, err)
	return info
}

// withheld polls until the server holds tenant's next jobs back: delivered
// jobs are unacknowledged, waiting ones are in the stream, and a reader's
// pull request is waiting for them. The server had a reader to hand the
// next job to and kept it: what a job over max-running needs to be absent.
func (s *setup) withheld(tenant string, delivered, waiting int) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		c := s.consumer(tenant)
		return c.NumAckPending == delivered && c.NumPending == uint64(waiting) && c.NumWaiting > 0
	}, wait, 10*time.Millisecond, "tenant %s: want %d delivered, %d waiting and a pull waiting", tenant, delivered, waiting)
}

// waitingForSlot polls until n readers wait for a slot, each with its
// tenant's next message in hand.
func waitingForSlot(t *testing.T, sch *scheduler.Scheduler, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return sch.WaitingForSlot() == n }, wait, 5*time.Millisecond, "%d readers waiting for a slot", n)
}

func tenantsConfig(qs ...scheduler.Quota) scheduler.Config {
	cfg := testConfig()
	cfg.Tenants = scheduler.StaticTenants(qs)
	return cfg
}

// The tenant is the subject's: two tenants may share an id, and a spec
// naming another tenant is rejected.
func TestTenantComesFromTheSubject(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, tenantsConfig(scheduler.Quota{Tenant: "a"}, scheduler.Quota{Tenant: "b"}))
	s.publishAs("a", []byte(`{"id":"same","command":"echo a"}`), "same")
	s.publishAs("b", []byte(`{"id":"same","command":"echo b"}`), "same")
	s.taskOf("a", "same")
	s.taskOf("b", "same")

	s.publishAs("a", []byte(`{"id":"forged","command":"echo","tenant":"b"}`), "forged")
	var r job.Result
	require.Eventually(t, func() bool {
		var err error
		r, err = s.store.Get(context.Background(), job.Key("a", "forged"))
		return err == nil
	}, wait, 10*time.Millisecond)
	assert.Equal(t, job.ReasonRejected, r.Reason)
	assert.Equal(t, "a", r.Tenant)
	require.NotEmpty(t, r.Errors)
	assert.Equal(t, "tenant", r.Errors[0].Field)
	assert.Contains(t, r.Errors[0].Message, `you are "a"`)
	assert.False(t, s.hasTask("b", "forged"), "nothing was enqueued for b")
}

// A tenant's max-running holds its jobs in its stream: only that many are
// in the queue at once, the next one enters when one finishes.
func TestMaxRunningHoldsTheBacklog(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, tenantsConfig(scheduler.Quota{Tenant: "a", MaxRunning: 2}))
	for i := range 5 {
		id := fmt.Sprint("j", i)
		s.publishAs("a", fmt.Appendf(nil, `{"id":%q,"command":"echo"}`, id), id)
	}
	s.taskOf("a", "j0")
	s.taskOf("a", "j1")
	s.withheld("a", 2, 3)
	assert.False(t, s.hasTask("a", "j2"), "max-running 2: the third job waits in the stream")
	assert.EqualValues(t, 2, s.held())
	s.finish("a", "j0")
	s.taskOf("a", "j2")
	assert.False(t, s.hasTask("a", "j3"))
	for _, id := range []string{"j1", "j2", "j3", "j4"} {
		s.taskOf("a", id)
		s.finish("a", id)
	}
	s.drained()
	assert.Zero(t, s.jobsInStream(), "every message acked once its job had a result")
}

// Fair share: tenant a's backlog fills every slot; tenant b's one job takes
// the second slot freed, not the last.
func TestSlotsAreSharedInTurn(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	cfg := tenantsConfig(scheduler.Quota{Tenant: "a"}, scheduler.Quota{Tenant: "b"})
	cfg.Slots = 2
	sch := s.scheduler(s.enq, cfg)
	for i := range 20 {
		id := fmt.Sprint("a", i)
		s.publishAs("a", fmt.Appendf(nil, `{"id":%q,"command":"echo"}`, id), id)
	}
	s.taskOf("a", "a0")
	s.taskOf("a", "a1")
	waitingForSlot(t, sch, 1) // a's reader, with a2
	s.publishAs("b", []byte(`{"id":"b0","command":"echo"}`), "b0")
	waitingForSlot(t, sch, 2) // then b's, with b0 in hand
	assert.False(t, s.hasTask("b", "b0"), "every slot is taken")
	s.finish("a", "a0")
	s.taskOf("a", "a2") // a was waiting first
	s.finish("a", "a1")
	s.taskOf("b", "b0") // then b, ahead of a's 17 others
	assert.False(t, s.hasTask("a", "a3"), "b's job went first")
}

// A tenant over its rate gets typed rejections naming the quota.
func TestRateQuotaRejects(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, tenantsConfig(scheduler.Quota{Tenant: "a", Rate: 2}))
	const n = 20
	for i := range n {
		id := fmt.Sprint("r", i)
		s.publishAs("a", fmt.Appendf(nil, `{"id":%q,"command":"echo"}`, id), id)
	}
	rejected := 0
	for i := range n {
		var r job.Result
		key := job.Key("a", fmt.Sprint("r", i))
		require.Eventually(t, func() bool {
			if s.hasTask("a", fmt.Sprint("r", i)) {
				return true
			}
			var err error
			r, err = s.store.Get(context.Background(), key)
			return err == nil
		}, wait, 10*time.Millisecond)
		if r.Reason == job.ReasonRejected {
			rejected++
			assert.Contains(t, r.Error, "rate quota of 2 jobs/s")
		}
	}
	assert.GreaterOrEqual(t, rejected, n-6, "at most 2 a second pass (3 windows at most on a slow machine)")
}

// pushTenants is a TenantSource the test drives: Watch delivers the first
// quotas, then whatever is sent on updates.
type pushTenants struct {
	first   []scheduler.Quota
	updates chan scheduler.Quota
}

func (p *pushTenants) Watch(ctx context.Context, fn func(scheduler.Quota, bool)) error {
	for _, q := range p.first {
		fn(q, false)
	}
	go func() {
		for {
			select {
			case q := <-p.updates:
				fn(q, q.MaxRunning < 0)
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// A quota change applies to a running scheduler: raising max-running lets
// the waiting jobs in, and a removed tenant is no longer consumed.
func TestQuotaChangeApplies(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	src := &pushTenants{first: []scheduler.Quota{{Tenant: "a", MaxRunning: 1}}, updates: make(chan scheduler.Quota)}
	cfg := testConfig()
	cfg.Tenants = src
	s.scheduler(s.enq, cfg)
	for i := range 3 {
		id := fmt.Sprint("q", i)
		s.publishAs("a", fmt.Appendf(nil, `{"id":%q,"command":"echo"}`, id), id)
	}
	s.taskOf("a", "q0")
	s.withheld("a", 1, 2)
	assert.False(t, s.hasTask("a", "q1"), "max-running 1")
	src.updates <- scheduler.Quota{Tenant: "a", MaxRunning: 3}
	s.taskOf("a", "q1")
	s.taskOf("a", "q2")

	src.updates <- scheduler.Quota{Tenant: "a", MaxRunning: -1} // deleted
	require.Eventually(t, func() bool { return s.consumer("a").NumWaiting == 0 }, wait, 10*time.Millisecond,
		"the removed tenant's reader stopped pulling")
	s.publishAs("a", []byte(`{"id":"after-rm","command":"echo"}`), "after-rm")
	s.finish("a", "q0") // room under max-running 3: only a pull is missing
	require.Eventually(t, func() bool { return s.consumer("a").NumAckPending == 2 }, wait, 10*time.Millisecond, "q0 acked")
	c := s.consumer("a")
	assert.Zero(t, c.NumWaiting, "no reader pulls a removed tenant's stream")
	assert.EqualValues(t, 1, c.NumPending, "after-rm is still in the stream")
	assert.False(t, s.hasTask("a", "after-rm"), "a removed tenant's stream is not consumed")
}
