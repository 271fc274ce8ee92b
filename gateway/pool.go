package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// Dialer connects to NATS as tenant: with the tenant's own identity and
// its inbox prefix (job.InboxPrefix), e.g. client.Connect with
// ConnectConfig.Tenant and a user JWT minted for the tenant.
type Dialer func(ctx context.Context, tenant string) (*nats.Conn, error)

// Pool is the Clients of a gateway: one NATS connection and client per
// tenant, dialed on the tenant's first request and kept until Close (a
// tenant costs one idle connection; there are as many as the registry
// holds). A failed dial is not remembered: the next request dials again.
type Pool struct {
	dial Dialer
	cfg  client.Config

	mu      sync.Mutex
	tenants map[string]*poolEntry
	closed  bool
}

type poolEntry struct {
	ready chan struct{} // closed when the dial ended
	c     *client.Client
	nc    *nats.Conn
	err   error
}

// NewPool returns a Pool that dials with dial; cfg is the template of each
// tenant's client.Config (its Tenant is set per tenant).
func NewPool(dial Dialer, cfg client.Config) *Pool {
	return &Pool{dial: dial, cfg: cfg, tenants: map[string]*poolEntry{}}
}

// Client returns the client of tenant, dialing it on first use; concurrent
// first requests share one dial.
func (p *Pool) Client(ctx context.Context, tenant string) (*client.Client, error) {
	if err := job.CheckTenant(tenant); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("gateway: the client pool is closed")
	}
	e, ok := p.tenants[tenant]
	if ok && e.dialed() && e.nc != nil && e.nc.IsClosed() {
		// nats.go gives up on a connection after repeated auth errors
		// (a server without the gateway key's account yet): dial again.
		ok = false
	}
	if !ok {
		e = &poolEntry{ready: make(chan struct{})}
		p.tenants[tenant] = e
		go p.connect(tenant, e)
	}
	p.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.c, e.err
}

// dialed reports whether e's dial ended (its fields are then set).
func (e *poolEntry) dialed() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// connect dials tenant for e, detached from the request that asked first
// (another request may be waiting for the same dial).
func (p *Pool) connect(tenant string, e *poolEntry) {
	defer close(e.ready)
	ctx, cancel := context.WithTimeout(context.Background(), 30e9)
	defer cancel()
	nc, err := p.dial(ctx, tenant)
	if err == nil {
		cfg := p.cfg
		cfg.Tenant = tenant
		if e.c, err = client.New(nc, cfg); err != nil {
			nc.Close()
		}
		e.nc = nc
	}
	if err != nil {
		e.err = fmt.Errorf("gateway: connect as tenant %s: %w", tenant, err)
		p.mu.Lock()
		if p.tenants[tenant] == e {
			delete(p.tenants, tenant)
		}
		p.mu.Unlock()
	}
}

// Close closes every tenant's client and connection.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	entries := p.tenants
	p.tenants = map[string]*poolEntry{}
	p.mu.Unlock()
	for _, e := range entries {
		<-e.ready
		if e.err == nil {
			e.c.Close()
			e.nc.Close()
		}
	}
}
