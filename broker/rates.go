package broker

import (
	"sync"

	"golang.org/x/time/rate"
)

// rates are the token buckets of a Broker: one per grant and tenant,
// shared by every job of that tenant the broker serves. A tenant that runs
// many jobs at once gets no more of a grant than one job would: the
// upstream's own limit on the grant's credential, shared by every tenant
// holding the grant, is not used up by one of them multiplying its jobs.
//
// The buckets live in the worker's process: a fleet of N workers lets a
// tenant make up to N times a grant's rate (docs/broker.md). The set of
// keys is bounded by the policies' grants and tenants (a call is admitted
// only for a grant its tenant has).
type rates struct {
	mu sync.Mutex
	m  map[rateKey]*rate.Limiter
}

type rateKey struct{ grant, tenant string }

func newRates() *rates { return &rates{m: map[rateKey]*rate.Limiter{}} }

// limiter is tenant's bucket of g, following a changed policy.
func (r *rates) limiter(g *grant, tenant string) *rate.Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := rateKey{g.name, tenant}
	l := r.m[k]
	switch {
	case l == nil:
		l = rate.NewLimiter(g.rate, g.burst)
		r.m[k] = l
	case l.Limit() != g.rate || l.Burst() != g.burst: // the policy changed
		l.SetLimit(g.rate)
		l.SetBurst(g.burst)
	}
	return l
}
