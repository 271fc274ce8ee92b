package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

// realTokens is the binary's token store (tenant.Tokens on a real NATS
// KV) with tenants dev and other, one token each, wrapped to count the
// lookups that reach the store.
type realTokens struct {
	dev, other string // the tokens' secrets
	devID      string // dev's token's id
	toks       *tenant.Tokens
	lookups    *atomic.Int64 // Verify calls that reached the store
	auth       Authenticator // counts lookups
	js         jetstream.JetStream
	sessions   *KVSessions
	logins     *countedLogins // the sessions bucket's logins, counting gets
}

func newRealTokens(t *testing.T) *realTokens {
	t.Helper()
	ns := testsvc.StartNATS(t)
	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	reg, err := tenant.NewRegistry(ctx, js)
	require.NoError(t, err)
	toks, err := tenant.NewTokens(ctx, js, reg)
	require.NoError(t, err)
	rt := &realTokens{lookups: &atomic.Int64{}, js: js, toks: toks}
	for _, name := range []string{"dev", "other"} {
		require.NoError(t, reg.Create(ctx, tenant.Tenant{Name: name}))
		secret, tok, err := toks.Issue(ctx, name, "test")
		require.NoError(t, err)
		if name == "dev" {
			rt.dev, rt.devID = secret, tok.ID
		} else {
			rt.other = secret
		}
	}
	rt.auth = AuthFunc(func(ctx context.Context, bearer string) (Identity, error) {
		rt.lookups.Add(1)
		tok, err := toks.Verify(ctx, bearer)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
		}
		return Identity{Tenant: tok.Tenant, TokenID: tok.ID}, nil
	})
	rt.sessions, err = NewKVSessions(ctx, js)
	require.NoError(t, err)
	rt.logins = &countedLogins{LoginStore: rt.sessions, gets: &atomic.Int64{}}
	return rt
}

// countedLogins counts the lookups of a real LoginStore.
type countedLogins struct {
	LoginStore
	gets *atomic.Int64
}

func (c *countedLogins) GetLogin(ctx context.Context, key string) (Login, error) {
	c.gets.Add(1)
	return c.LoginStore.GetLogin(ctx, key)
}

// gateway serves a gateway on rt's stores (no fleet behind it: an
// authenticated request reaches the fleet view, which names its tenant).
func (rt *realTokens) gateway(t *testing.T, mod func(*Config)) (*Gateway, string) {
	t.Helper()
	pool := NewPool(func(ctx context.Context, tn string) (*nats.Conn, error) {
		return nats.Connect("nats://127.0.0.1:1", nats.Timeout(time.Second), nats.CustomInboxPrefix(job.InboxPrefix(tn)))
	}, client.Config{})
	t.Cleanup(pool.Close)
	cfg := Config{Auth: rt.auth, Clients: pool, Sessions: rt.sessions, Logins: rt.logins, Logger: slog.New(slog.DiscardHandler),
		Fleet: func(_ context.Context, tn string) (any, error) {
			return map[string]any{"tenant": tn, "workers": []any{}, "capacity": map[string]int{"workers_alive": 0, "slots": 0},
				"queues": []any{}, "reasons": []any{}}, nil
		}}
	if mod != nil {
		mod(&cfg)
	}
	g, err := New(cfg)
	require.NoError(t, err)
	return g, serveTest(t, g.Handler())
}

// fakeToken is a well-formed token that no store holds: it passes the
// shape check, so checking it costs a lookup.
func fakeToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return tenant.TokenPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

// send sends one request from the client address from (X-Forwarded-For,
// believed from the test's trusted proxy 127.0.0.1) and returns the
// status, Retry-After and body.
func send(t *testing.T, method, url, from, body string, header ...string) (int, string, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if from != "" {
		req.Header.Set("X-Forwarded-For", from)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(data)
}

// An anonymous attacker floods every endpoint with well-formed fake
// tokens and login ids. Past the burst of its address, every attempt is
// 429 with Retry-After before any lookup: the token store and the login
// store see at most the burst. A tenant at another address is not slowed,
// nor is one at the attacker's address whose token worked before.
func TestAttackFakeTokenFlood(t *testing.T) {
	t.Parallel()
	rt := newRealTokens(t)
	const burst = 5
	_, url := rt.gateway(t, func(c *Config) {
		c.AuthFailRate, c.AuthFailBurst = 0.001, burst // one failure back every 1000 s
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	const attacker, neighbour, victim = "203.0.113.7", "203.0.113.7", "198.51.100.9"

	// The neighbour's token works before the flood: it is known good.
	code, _, body := send(t, http.MethodGet, url+"/v1/fleet", neighbour, "", "Authorization", "Bearer "+rt.other)
	require.Equal(t, http.StatusOK, code, body)
	before := rt.lookups.Load()

	statuses := map[int]int{}
	attempts := []func() (int, string, string){
		func() (int, string, string) {
			return send(t, http.MethodGet, url+"/v1/jobs", attacker, "", "Authorization", "Bearer "+fakeToken())
		},
		func() (int, string, string) {
			return send(t, http.MethodPost, url+"/mcp", attacker, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
				"Authorization", "Bearer "+fakeToken(), "Accept", "application/json, text/event-stream")
		},
		func() (int, string, string) {
			return send(t, http.MethodPost, url+"/ui/login", attacker, `{"token":"`+fakeToken()+`"}`, csrfHeader, "1")
		},
		func() (int, string, string) {
			return send(t, http.MethodGet, url+"/v1/fleet", attacker, "", cookieHeader, sessionCookie+"="+newLoginID())
		},
		func() (int, string, string) {
			return send(t, http.MethodGet, url+"/ui/session", attacker, "", cookieHeader, sessionCookie+"="+newLoginID())
		},
	}
	const n = 200
	for i := range n {
		code, retry, body := attempts[i%len(attempts)]()
		statuses[code]++
		if code == http.StatusTooManyRequests {
			assert.NotEmpty(t, retry, "a 429 says when to retry: %s", body)
		}
	}
	t.Logf("statuses: %v, token lookups %d, login lookups %d", statuses, rt.lookups.Load()-before, rt.logins.gets.Load())
	assert.Equal(t, n-burst, statuses[http.StatusTooManyRequests], "past the burst every attempt is refused: %v", statuses)
	assert.LessOrEqual(t, rt.lookups.Load()-before+rt.logins.gets.Load(), int64(burst),
		"the stores saw at most the burst of lookups")

	// A token never seen working waits like the attacker at its address.
	code, retry, body := send(t, http.MethodGet, url+"/v1/fleet", attacker, "", "Authorization", "Bearer "+rt.dev)
	assert.Equal(t, http.StatusTooManyRequests, code, body)
	assert.NotEmpty(t, retry)
	assert.Contains(t, body, "too many failed credentials from your address "+attacker)
	// A tenant elsewhere is not slowed by the attacker's failures.
	code, _, body = send(t, http.MethodGet, url+"/v1/fleet", victim, "", "Authorization", "Bearer "+rt.dev)
	assert.Equal(t, http.StatusOK, code, body)
	// Nor is the neighbour behind the attacker's address whose token
	// worked: it is still looked up (a revocation would show at once).
	lookups := rt.lookups.Load()
	code, _, body = send(t, http.MethodGet, url+"/v1/fleet", neighbour, "", "Authorization", "Bearer "+rt.other)
	assert.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, lookups+1, rt.lookups.Load(), "a known-good token is still checked in the store")
}

// X-Forwarded-For is believed only from a trusted proxy: an attacker that
// writes its own cannot spread its failures over made-up addresses.
func TestAttackSpoofedForwardedFor(t *testing.T) {
	t.Parallel()
	rt := newRealTokens(t)
	const burst = 3
	_, url := rt.gateway(t, func(c *Config) { c.AuthFailRate, c.AuthFailBurst = 0.001, burst })
	limited := 0
	for i := range 30 {
		from := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String()
		code, _, _ := send(t, http.MethodGet, url+"/v1/jobs", from, "", "Authorization", "Bearer "+fakeToken())
		if code == http.StatusTooManyRequests {
			limited++
		}
	}
	assert.Equal(t, 30-burst, limited, "every made-up address counts as the peer's")
	assert.LessOrEqual(t, rt.lookups.Load(), int64(burst))
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		remote, xff, want string
	}{
		{"192.0.2.1:5000", "", "192.0.2.1"},
		{"192.0.2.1:5000", "198.51.100.1", "192.0.2.1"},             // an untrusted peer's header is ignored
		{"10.1.2.3:5000", "198.51.100.1", "198.51.100.1"},           // a trusted proxy's is believed
		{"10.1.2.3:5000", "6.6.6.6, 198.51.100.1", "198.51.100.1"},  // the rightmost untrusted hop, not what the client wrote
		{"10.1.2.3:5000", "198.51.100.1, 10.9.9.9", "198.51.100.1"}, // proxies' own hops are skipped
		{"10.1.2.3:5000", "garbage", "10.1.2.3"},
		{"[2001:db8:1:2:3:4:5:6]:443", "", "2001:db8:1:2::/64"}, // IPv6 by its /64
		{"[::1]:443", "2001:db8::9", "2001:db8::/64"},
		{"[::ffff:192.0.2.7]:1", "", "192.0.2.7"},
	} {
		r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		assert.Equal(t, tc.want, clientAddr(r, trusted), "%s %q", tc.remote, tc.xff)
	}
}

// The guard's memory is bounded: addresses past maxGuardAddrs share one
// bucket, and a full bucket is dropped after it refilled.
func TestGuardBounded(t *testing.T) {
	t.Parallel()
	g := newGuard(1, 2)
	t0 := limT0
	for i := range maxGuardAddrs + 10 {
		g.failed(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String(), t0)
	}
	assert.Len(t, g.addrs, maxGuardAddrs+1, "the rest share the overflow bucket")
	ok, _ := g.admit("192.0.2.99", "x", t0)
	assert.False(t, ok, "a new address past the bound shares the drained overflow bucket")
	g.failed("a", t0.Add(time.Hour))
	assert.Len(t, g.addrs, 1, "the idle buckets were dropped")
}
