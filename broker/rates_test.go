package broker_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
	"github.com/paddockhq/paddock/internal/testsvc"
)

// TestRedisLimiterFleetWide: two brokers (two workers) sharing a
// RedisLimiter on a real Redis share each tenant's bucket of a grant: what
// acme used on one worker is gone on the other, and beta keeps its own.
func TestRedisLimiterFleetWide(t *testing.T) {
	t.Parallel()
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	lim := broker.NewRedisLimiter(rdb, testsvc.Unique("paddock:test:rate:")+":")
	withLimiter := func(c *broker.Config) { c.Limiter = lim }
	w1, w2 := newSetup(t, withLimiter), newSetup(t, withLimiter)
	acme1 := w1.serve(acmeJob())
	acme2 := w2.serve(broker.JobInfo{Tenant: "acme", ID: "job-2", Grants: acmeGrants})
	beta2 := w2.serve(broker.JobInfo{Tenant: "beta", ID: "job-3", Grants: []string{"limited"}})

	// "limited": burst 2, then one call per 1000 s.
	require.Equal(t, http.StatusOK, acme1.do("GET", "http://limited/items", "").Status)
	require.Equal(t, http.StatusOK, acme2.do("GET", "http://limited/items", "").Status)
	for _, bx := range []*box{acme1, acme2} {
		a := bx.do("GET", "http://limited/items", "")
		assert.Equal(t, http.StatusTooManyRequests, a.Status, a.Body)
		assert.Contains(t, a.Body, "for tenant acme")
		assert.Equal(t, "1000", a.Header.Get("Retry-After"))
	}
	for range 2 {
		a := beta2.do("GET", "http://limited/items", "")
		assert.Equal(t, http.StatusOK, a.Status, "beta's own bucket: %s", a.Body)
	}
	assert.Equal(t, http.StatusTooManyRequests, beta2.do("GET", "http://limited/items", "").Status)
	assert.Len(t, w1.up.seen(), 1)
	assert.Len(t, w2.up.seen(), 3)
}

// failingRedis is a real client whose scripts fail, as when Redis is down.
type failingRedis struct{ *redis.Client }

func (f failingRedis) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errors.New("dial unix: connection refused"))
	return cmd
}

// TestRedisLimiterDown: when the limiter cannot answer, calls are refused
// (a shared credential's rate is never exceeded for want of a count), and
// nothing reaches the upstream.
func TestRedisLimiterDown(t *testing.T) {
	t.Parallel()
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	s := newSetup(t, func(c *broker.Config) { c.Limiter = broker.NewRedisLimiter(failingRedis{rdb}, "") })
	bx := s.serve(acmeJob())
	a := bx.do("GET", "http://svc/items", "")
	assert.Equal(t, http.StatusServiceUnavailable, a.Status)
	assert.Equal(t, string(broker.RuleRate), a.Header.Get(broker.HeaderRule))
	assert.Contains(t, a.Body, "grant svc: the broker cannot check the grant's rate right now")
	assert.Empty(t, s.up.seen())
	assert.Contains(t, s.logs.String(), "connection refused")
}

// TestSecretRateSharedByGrantsAndTenants: a credential's rate
// (secret_rates) is one bucket for every grant that injects it and every
// tenant: two tenants on two grants of the same key share it.
func TestSecretRateSharedByGrantsAndTenants(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	pol, err := broker.ParsePolicy([]byte(`{
  "grants": [
    {"name": "read", "url": "` + s.up.srv.URL + `/api", "headers": {"Authorization": "Bearer ${secret:svc-token}"}},
    {"name": "write", "url": "` + s.up.srv.URL + `/api", "methods": ["POST"], "headers": {"Authorization": "Bearer ${secret:svc-token}"}},
    {"name": "other", "url": "` + s.up.srv.URL + `/api", "headers": {"Authorization": "Bearer ${secret:other-token}"}}
  ],
  "tenants": {"acme": ["read", "other"], "beta": ["write", "other"]},
  "secret_rates": {"svc-token": {"per_second": 0.001, "burst": 2}}}`))
	require.NoError(t, err)
	require.NoError(t, s.b.SetPolicy(pol))
	acme := s.serve(broker.JobInfo{Tenant: "acme", ID: "a-1", Grants: []string{"read", "other"}})
	beta := s.serve(broker.JobInfo{Tenant: "beta", ID: "b-1", Grants: []string{"write", "other"}})
	require.Equal(t, http.StatusOK, acme.do("GET", "http://read/items", "").Status)
	require.Equal(t, http.StatusOK, beta.do("POST", "http://write/items", "x").Status)
	for _, a := range []answer{acme.do("GET", "http://read/items", ""), beta.do("POST", "http://write/items", "x")} {
		assert.Equal(t, http.StatusTooManyRequests, a.Status, a.Body)
		assert.Equal(t, string(broker.RuleRate), a.Header.Get(broker.HeaderRule))
		assert.Contains(t, a.Body, `its credential "svc-token" is over its rate of 0.001 calls/s (burst 2), shared by every grant and tenant using it`)
		assert.Equal(t, "1000", a.Header.Get("Retry-After"))
	}
	assert.Equal(t, http.StatusOK, acme.do("GET", "http://other/items", "").Status, "another credential is not limited")
	assert.Len(t, s.up.seen(), 3)
}
