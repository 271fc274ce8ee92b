package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/paddockhq/paddock/job"
)

// Quota is what the scheduler enforces for one tenant. A zero field is
// "no limit of its own" (MaxRunning: Config.MaxRunning).
type Quota struct {
	Tenant string
	// MaxQueued bounds the tenant's submissions waiting or running: its
	// stream's MaxMsgs, so the NATS server refuses the next publish.
	MaxQueued int64
	// MaxRunning bounds the tenant's jobs in the queue or running at once:
	// its consumer's MaxAckPending (a message is held until its job has a
	// result). More wait in the tenant's stream, in order.
	MaxRunning int
	// Rate bounds the tenant's jobs scheduled per second, fleet-wide; a
	// job over it is rejected (reason rejected, field tenant).
	Rate int
	// MaxStored is the size of each of the tenant's buckets, in bytes (0:
	// Config.Streams.Stores.StoredMaxBytes).
	MaxStored int64
}

// TenantSource tells a Scheduler which tenants exist (package tenant's
// Registry, through cmd). Watch calls fn with every tenant now, then with
// each change, until ctx ends; deleted is true for a removed tenant. It
// returns once the current tenants were delivered, and keeps watching in
// the background.
type TenantSource interface {
	Watch(ctx context.Context, fn func(q Quota, deleted bool)) error
}

// StaticTenants is a TenantSource of a fixed set (the default when Config
// names none: job.DefaultTenant without limits).
type StaticTenants []Quota

// Watch delivers the set once.
func (s StaticTenants) Watch(_ context.Context, fn func(Quota, bool)) error {
	for _, q := range s {
		fn(q, false)
	}
	return nil
}

// ErrQuota is wrapped by the rejection of a job over a tenant's quota.
var ErrQuota = errors.New("scheduler: over quota")

// checkTenant makes the tenant of the subject the spec's: a spec may omit
// it or name its own, never another.
func checkTenant(s *job.Spec, tenant string) error {
	if s.Tenant != "" && s.Tenant != tenant {
		return &job.ValidationError{Fields: []job.FieldError{{Field: "tenant",
			Message: fmt.Sprintf("%q is not your tenant; the tenant comes from your credentials (you are %q)", s.Tenant, tenant)}}}
	}
	s.Tenant = tenant
	return nil
}

// Admitter is the part of *results.Store that keeps the tenants' rate
// window, one counter the whole fleet of schedulers shares.
type Admitter interface {
	Admit(ctx context.Context, tenant string, perSecond int) (bool, error)
}

// overRate counts one job of tenant against its rate quota; it returns a
// rejection when the tenant is over it.
func (s *Scheduler) overRate(ctx context.Context, tenant string) (error, error) {
	q, ok := s.quota(tenant)
	if !ok || q.Rate <= 0 {
		return nil, nil
	}
	ok, err := s.admit.Admit(ctx, tenant, q.Rate)
	if err != nil || ok {
		return nil, err
	}
	return &job.ValidationError{Fields: []job.FieldError{{Field: "tenant", Message: fmt.Sprintf(
		"tenant %s is over its rate quota of %d jobs/s (%v); submit more slowly, or ask the operator to raise it (paddock tenant add %s --rate N)",
		tenant, q.Rate, ErrQuota, tenant)}}}, nil
}

// quota returns the tenant's quota as last seen.
func (s *Scheduler) quota(tenant string) (Quota, bool) {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	q, ok := s.quotas[tenant]
	return q, ok
}
