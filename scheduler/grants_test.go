package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
)

// rejection polls for tenant's job id to be recorded, and returns it.
func (s *setup) rejection(tenant, id string) job.Result {
	s.t.Helper()
	var r job.Result
	require.Eventually(s.t, func() bool {
		var err error
		r, err = s.store.Get(context.Background(), job.Key(tenant, id))
		return err == nil
	}, wait, 10*time.Millisecond)
	return r
}

// A job may name only its tenant's grants of the broker policy; each other
// grant is a typed field error, and nothing is enqueued.
func TestGrantsAreCheckedAgainstThePolicy(t *testing.T) {
	t.Parallel()
	pol, err := broker.ParsePolicy([]byte(`{"grants": [
	  {"name": "gh", "url": "https://api.github.com"},
	  {"name": "crm", "url": "https://crm.example.com"}],
	  "tenants": {"a": ["gh"], "b": ["crm"]}}`))
	require.NoError(t, err)
	s := newSetup(t)
	cfg := tenantsConfig(scheduler.Quota{Tenant: "a"}, scheduler.Quota{Tenant: "b"})
	cfg.Grants = pol
	s.scheduler(s.enq, cfg)

	s.publishAs("a", []byte(`{"id":"ok","command":"true","grants":["gh"]}`), "ok")
	s.taskOf("a", "ok")

	s.publishAs("a", []byte(`{"id":"theirs","command":"true","grants":["gh","crm","typo"]}`), "theirs")
	r := s.rejection("a", "theirs")
	assert.Equal(t, job.ReasonRejected, r.Reason)
	require.Len(t, r.Errors, 2, "%v", r.Errors)
	assert.Equal(t, job.FieldError{Field: "grants[1]", Message: `tenant "a" has no grant "crm": ask the operator to add it to the tenant in the broker policy`}, r.Errors[0])
	assert.Equal(t, "grants[2]", r.Errors[1].Field)
	assert.Contains(t, r.Errors[1].Message, `grant "typo" does not exist in the broker policy`)
	assert.False(t, s.hasTask("a", "theirs"))
}

// Without a policy the fleet runs no broker: any grant is refused.
func TestGrantsWithoutBroker(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, tenantsConfig(scheduler.Quota{Tenant: "a"}))
	s.publishAs("a", []byte(`{"id":"g","command":"true","grants":["gh"]}`), "g")
	r := s.rejection("a", "g")
	assert.Equal(t, job.ReasonRejected, r.Reason)
	require.Len(t, r.Errors, 1)
	assert.Equal(t, "grants[0]", r.Errors[0].Field)
	assert.Contains(t, r.Errors[0].Message, "this fleet runs no secrets broker")
	assert.False(t, s.hasTask("a", "g"))
}
