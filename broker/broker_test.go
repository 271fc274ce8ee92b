package broker_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
)

func TestGrantedGET(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())

	a := bx.do("GET", "http://svc/items?page=2&q=rows", "",
		"Accept", "application/json", "User-Agent", "job/1", "X-Request-Id", "r-1", "X-Custom", "dropped")
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	assert.Equal(t, `{"ok":true}`, a.Body)
	assert.Equal(t, "application/json", a.Header.Get("Content-Type"))
	assert.Empty(t, a.Header.Get(broker.HeaderRule))

	seen := s.up.seen()
	require.Len(t, seen, 1)
	up := seen[0]
	assert.Equal(t, "GET", up.Method)
	assert.Equal(t, "/api/items?page=2&q=rows", up.URI, "the box's path goes under the grant's base URL")
	assert.Equal(t, strings.TrimPrefix(s.up.srv.URL, "https://"), up.Host, "the upstream's own Host, not the grant's name")
	assert.Equal(t, "Bearer "+canary, up.Header.Get("Authorization"), "the secret is injected")
	assert.Equal(t, "2", up.Header.Get("X-Api-Version"))
	assert.Equal(t, "application/json", up.Header.Get("Accept"))
	assert.Equal(t, "job/1", up.Header.Get("User-Agent"))
	assert.Equal(t, "r-1", up.Header.Get("X-Request-Id"), "named in the grant's pass_headers")
	assert.Empty(t, up.Header.Get("X-Custom"), "a header neither safe nor passed stays in the box")
	assert.Equal(t, "identity", up.Header.Get("Accept-Encoding"))

	bx.stop()
	calls := bx.calls.Calls()
	require.Len(t, calls, 1)
	c := calls[0]
	assert.Equal(t, "svc", c.Grant)
	assert.Equal(t, "GET", c.Method)
	assert.Equal(t, "/items", c.Path)
	assert.Equal(t, []string{"page", "q"}, c.QueryKeys, "names of the query parameters, no values")
	assert.Equal(t, 200, c.Status)
	assert.Empty(t, c.Rule)
	assert.Equal(t, int64(len(`{"ok":true}`)), c.BytesOut)
}

func TestGrantedPOSTAndHEAD(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())

	a := bx.do("POST", "http://svc/items", `{"n":1}`, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	a = bx.do("HEAD", "http://svc/big", "")
	require.Equal(t, http.StatusOK, a.Status)
	assert.Equal(t, "5000", a.Header.Get("Content-Length"), "HEAD keeps the upstream's length")

	seen := s.up.seen()
	require.Len(t, seen, 2)
	assert.Equal(t, `{"n":1}`, string(seen[0].Body))
	assert.Equal(t, "application/json", seen[0].Header.Get("Content-Type"))
	bx.stop()
	assert.Equal(t, int64(7), bx.calls.Calls()[0].BytesIn)
}

// TestRefused checks every refusal of a call: its status, its rule, a
// message naming the grant and the rule, and that nothing reached the
// upstream.
func TestRefused(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	big := strings.Repeat("b", 65)
	for _, tc := range []struct {
		name   string
		send   func() answer
		status int
		rule   broker.Rule
		msg    string
	}{
		{"method", func() answer { return bx.do("DELETE", "http://svc/items", "") },
			403, broker.RuleMethod, "grant svc: method DELETE not allowed (allowed: GET, POST, HEAD)"},
		{"path", func() answer { return bx.do("GET", "http://narrow/admin", "") },
			403, broker.RulePath, `grant narrow: path "/admin" is outside the grant (allowed: /repos/paddock, /users/*/keys)`},
		{"path-boundary", func() answer { return bx.do("GET", "http://narrow/repos/paddock-evil", "") },
			403, broker.RulePath, "outside the grant"},
		{"wildcard-segment", func() answer { return bx.do("GET", "http://narrow/users/keys", "") },
			403, broker.RulePath, "outside the grant"},
		{"dotdot", func() answer { return bx.raw("GET /repos/paddock/../../admin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "grant narrow: path segment 3 is a dot segment"},
		{"encoded-dotdot", func() answer { return bx.raw("GET /repos/paddock/%2e%2E/admin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "percent-encodes an unreserved character (%2e)"},
		{"overlong-dotdot", func() answer { return bx.raw("GET /repos/paddock/%C0%AE%C0%AE/admin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "grant narrow: path segment 3 is not UTF-8 once decoded"},
		{"overlong-slash", func() answer { return bx.raw("GET /repos/paddock%C0%AF..%C0%AFadmin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "is not UTF-8 once decoded"},
		{"fullwidth-dotdot", func() answer { return bx.raw("GET /repos/paddock/%EF%BC%8E%EF%BC%8E/admin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "dot segment"},
		{"encoded-slash", func() answer { return bx.raw("GET /repos/paddock%2F..%2Fadmin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "hides '/'"},
		{"double-encoded", func() answer { return bx.raw("GET /repos/paddock/%252e%252e/admin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "hides '/', '\\', '%'"},
		{"backslash", func() answer { return bx.raw("GET /repos/paddock/..\\admin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "character the broker does not accept"},
		{"dotdot-params", func() answer { return bx.raw("GET /repos/paddock/..;x=1/admin HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RulePath, "dot segment"},
		{"empty-segment", func() answer { return bx.raw("GET //elsewhere.example/x HTTP/1.1\nHost: svc\n\n") },
			403, broker.RulePath, "empty segment"},
		{"absolute-url", func() answer { return bx.raw("GET http://narrow/repos/paddock HTTP/1.1\nHost: narrow\n\n") },
			403, broker.RuleTarget, "is not a path: absolute URLs and authority forms are refused"},
		{"unknown-grant", func() answer { return bx.do("GET", "http://nosuch/items", "") },
			403, broker.RuleUnknownGrant, `grant "nosuch" does not exist`},
		{"not-requested", func() answer { return bx.do("GET", "http://other/items", "") },
			403, broker.RuleNotRequested, "grant other: this job did not ask for it"},
		{"tenant-lacks", func() answer { return bx.do("GET", "http://beta-only/items", "") },
			403, broker.RuleTenant, "grant beta-only: tenant acme does not have it"},
		{"body-too-big", func() answer { return bx.do("POST", "http://svc/items", big) },
			413, broker.RuleRequestSize, "grant svc: request body of 65 bytes is over max_request_bytes (64)"},
		{"chunked-too-big", func() answer {
			return bx.raw("POST /items HTTP/1.1\nHost: svc\nTransfer-Encoding: chunked\n\n41\n" + big + "\n0\n\n")
		}, 413, broker.RuleRequestSize, "over max_request_bytes (64)"},
	} {
		a := tc.send()
		assert.Equal(t, tc.status, a.Status, "%s: %s", tc.name, a.Body)
		assert.Equal(t, string(tc.rule), a.Header.Get(broker.HeaderRule), tc.name)
		assert.Contains(t, a.Body, tc.msg, tc.name)
		assert.True(t, strings.HasSuffix(a.Body, "\n") && strings.Count(a.Body, "\n") == 1, "%s: one line: %q", tc.name, a.Body)
	}
	assert.Empty(t, s.up.seen(), "no refused call reaches the upstream")
	bx.stop()
	calls := bx.calls.Calls()
	require.Len(t, calls, 20)
	for _, c := range calls {
		assert.NotEmpty(t, c.Rule, "%+v", c)
		assert.NotEmpty(t, c.Error, "%+v", c)
	}
}

// TestRateLimited: a grant's rate is per grant and tenant: a second job of
// the same tenant shares the first's bucket (a tenant cannot multiply a
// shared credential's rate by running more jobs), another tenant has its
// own.
func TestRateLimited(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	sibling := s.serve(broker.JobInfo{Tenant: "acme", ID: "job-2", Grants: acmeGrants})
	beta := s.serve(broker.JobInfo{Tenant: "beta", ID: "job-3", Grants: []string{"limited"}})
	// "limited": burst 2, then one call per 1000 s.
	for i := range 2 {
		a := bx.do("GET", "http://limited/items", "")
		require.Equal(t, http.StatusOK, a.Status, "call %d: %s", i, a.Body)
	}
	a := bx.do("GET", "http://limited/items", "")
	assert.Equal(t, http.StatusTooManyRequests, a.Status)
	assert.Equal(t, string(broker.RuleRate), a.Header.Get(broker.HeaderRule))
	assert.Contains(t, a.Body, "grant limited: over its rate of 0.001 calls/s (burst 2) for tenant acme")
	assert.Equal(t, "1000", a.Header.Get("Retry-After"))

	a = sibling.do("GET", "http://limited/items", "")
	assert.Equal(t, http.StatusTooManyRequests, a.Status, "another job of acme shares acme's bucket: %s", a.Body)
	for i := range 2 {
		a = beta.do("GET", "http://limited/items", "")
		assert.Equal(t, http.StatusOK, a.Status, "beta's call %d has beta's own bucket: %s", i, a.Body)
	}
	a = beta.do("GET", "http://limited/items", "")
	assert.Equal(t, http.StatusTooManyRequests, a.Status)
	assert.Contains(t, a.Body, "for tenant beta")
	assert.Len(t, s.up.seen(), 4, "2 calls of acme, 2 of beta")
	bx.stop()
	sibling.stop()
	beta.stop()
	assert.Len(t, bx.calls.Calls(), 3)
	assert.Len(t, sibling.calls.Calls(), 1, "each job's record holds its own calls")
}

// TestBoxCredentialsNeverForwarded: the box's own Authorization, cookies,
// proxy credentials and host overrides stay in the box.
func TestBoxCredentialsNeverForwarded(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	a := bx.do("GET", "http://svc/items", "",
		"Authorization", "Bearer from-the-box", "Cookie", "sid=box", "Proxy-Authorization", "Basic Ym94",
		"X-Forwarded-Host", "evil.example", "Forwarded", "host=evil.example", "X-Real-Ip", "10.0.0.1",
		"Accept-Encoding", "gzip")
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	up := s.up.seen()[0]
	assert.Equal(t, []string{"Bearer " + canary}, up.Header.Values("Authorization"), "only the injected Authorization")
	for _, h := range []string{"Cookie", "Proxy-Authorization", "X-Forwarded-Host", "Forwarded", "X-Real-Ip"} {
		assert.Empty(t, up.Header.Values(h), h)
	}
	assert.Equal(t, "identity", up.Header.Get("Accept-Encoding"))
	assert.NotContains(t, fmt.Sprint(up.Header), "from-the-box")
	assert.NotContains(t, fmt.Sprint(up.Header), "evil.example")
}

// secretForms are the ways an upstream may give the canary back.
func secretForms() []string {
	return []string{canary, "cAnArY-7f3a9c2e", jsonHTMLEscaped(canary), urlQueryEscaped(canary)}
}

// TestEchoedSecretRedacted: an upstream that echoes the credential in
// headers and in the body; the box never sees it.
func TestEchoedSecretRedacted(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	a := bx.do("GET", "http://svc/echo", "")
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	require.Contains(t, s.up.seen()[0].Header.Get("Authorization"), canary, "the upstream did get the secret")
	assert.Equal(t, "kept", a.Header.Get("X-Safe"))
	for _, h := range []string{"X-Echo", "Set-Cookie", "Www-Authenticate"} {
		assert.Empty(t, a.Header.Values(h), h)
	}
	for _, form := range secretForms() {
		assert.NotContains(t, a.Body, form)
		assert.NotContains(t, fmt.Sprint(a.Header), form)
	}
	assert.Contains(t, a.Body, "raw=[REDACTED]")
	assert.Contains(t, a.Body, `{"auth":"[REDACTED]"}`)
	assert.Contains(t, a.Body, "query=[REDACTED]")
	assert.Contains(t, a.Body, "path=[REDACTED]")
	assert.Equal(t, "5", a.Header.Get(broker.HeaderRedacted), "4 in the body, the X-Echo header")

	// The scoped token is held back the same way.
	a = bx.do("GET", "http://tok/echo", "")
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	tok := strings.TrimPrefix(s.up.seen()[1].Header.Get("Authorization"), "Bearer ")
	require.NotEmpty(t, tok)
	assert.NotContains(t, a.Body, tok)
	assert.NotContains(t, fmt.Sprint(a.Header), tok)
}

func TestResponseRefused(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	for _, tc := range []struct {
		path   string
		status int
		rule   broker.Rule
		msg    string
	}{
		{"/big", 502, broker.RuleResponseSize, "grant svc: the response is over max_response_bytes (4096)"},
		{"/chunked", 502, broker.RuleResponseSize, "over max_response_bytes (4096)"},
		{"/br", 502, broker.RuleEncoding, `the upstream sent a "br"-encoded body, which the broker cannot check for secrets`},
	} {
		a := bx.do("GET", "http://svc"+tc.path, "")
		assert.Equal(t, tc.status, a.Status, tc.path)
		assert.Equal(t, string(tc.rule), a.Header.Get(broker.HeaderRule), tc.path)
		assert.Contains(t, a.Body, tc.msg, tc.path)
	}
	assert.Len(t, s.up.seen(), 3)
}

func TestNoRedirectFollowed(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	a := bx.do("GET", "http://svc/redirect", "")
	assert.Equal(t, http.StatusFound, a.Status, "returned, not followed")
	assert.Equal(t, "https://elsewhere.example/steal", a.Header.Get("Location"))
	a = bx.do("GET", "http://svc/inside", "")
	assert.Equal(t, http.StatusFound, a.Status)
	assert.Equal(t, "http://svc/items?page=3", a.Header.Get("Location"), "a redirect under the grant goes through the broker")
	assert.Len(t, s.up.seen(), 2, "the broker followed no redirect")
}

func TestUpstreamTimeout(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	a := bx.do("GET", "http://quick/sleep", "")
	assert.Equal(t, http.StatusGatewayTimeout, a.Status, a.Body)
	assert.Equal(t, string(broker.RuleTimeout), a.Header.Get(broker.HeaderRule))
	assert.Contains(t, a.Body, "grant quick: no answer within the grant's timeout (20ms)")
}

// TestTLSVerified: the broker's default client verifies the upstream's
// certificate, and a client that would not is refused.
func TestTLSVerified(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *broker.Config) { c.HTTPClient = nil })
	bx := s.serve(acmeJob())
	a := bx.do("GET", "http://svc/items", "")
	assert.Equal(t, http.StatusBadGateway, a.Status)
	assert.Equal(t, string(broker.RuleUpstream), a.Header.Get(broker.HeaderRule))
	assert.Contains(t, a.Body, "certificate")
	assert.Empty(t, s.up.seen(), "no request on an unverified connection")

	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	pol, err := broker.ParsePolicy([]byte(`{}`))
	require.NoError(t, err)
	_, err = broker.New(pol, s.secrets, broker.Config{HTTPClient: insecure})
	assert.ErrorIs(t, err, broker.ErrConfig)
	assert.ErrorContains(t, err, "skips TLS verification")
}

// TestServeEnds: when the job ends, the socket refuses a leftover call, on a
// new connection and on one kept alive, and a call in progress is ended.
func TestServeEnds(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	require.Equal(t, http.StatusOK, bx.do("GET", "http://svc/items", "").Status) // a kept-alive connection now

	inProgress := make(chan error, 1)
	go func() {
		resp, err := bx.client.Get("http://svc/sleep")
		if err == nil {
			err = fmt.Errorf("status %d", resp.StatusCode)
			resp.Body.Close()
		}
		inProgress <- err
	}()
	require.Equal(t, "/api/sleep", waitURI(t, s.up, "/api/sleep"))
	bx.stop()
	select {
	case err := <-inProgress:
		assert.Error(t, err, "the call in progress ended with the job")
	case <-time.After(10 * time.Second):
		t.Fatal("the call in progress outlived the job")
	}

	_, err := bx.client.Get("http://svc/items")
	assert.Error(t, err, "a leftover call on the kept-alive client")
	_, err = net.Dial("unix", bx.sock)
	assert.Error(t, err, "no new connection")
	_, err = os.Stat(bx.sock)
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket file is gone")
}

func waitURI(t *testing.T, up *upstream, uri string) string {
	t.Helper()
	for {
		select {
		case got := <-up.got:
			if got == uri {
				return got
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the upstream never got %s", uri)
		}
	}
}

func TestServeEndsAtDeadline(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "b.sock"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- s.b.Serve(context.Background(), ln, broker.JobInfo{Tenant: "acme", ID: "late", Deadline: time.Now().Add(-time.Second)})
	}()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve outlived the job's deadline")
	}
	_, err = net.Dial("unix", ln.Addr().String())
	assert.Error(t, err)
}

func TestServeBadJob(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for _, j := range []broker.JobInfo{{Tenant: "acme"}, {Tenant: "Bad Tenant", ID: "x"}} {
		ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "b.sock"))
		require.NoError(t, err)
		err = s.b.Serve(context.Background(), ln, j)
		assert.ErrorIs(t, err, broker.ErrJob)
		_, err = net.Dial("unix", ln.Addr().String())
		assert.Error(t, err, "Serve closed the listener")
	}
}

// TestReloadSecret: a changed secret file is used after Reload (the
// worker's SIGHUP), and a bad one leaves the previous secrets in force.
func TestReloadSecret(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	require.Equal(t, http.StatusOK, bx.do("GET", "http://svc/items", "").Status)

	writeSecret(t, s.dir, "svc-token", "rotated-secret-2\n")
	require.Equal(t, http.StatusOK, bx.do("GET", "http://svc/items", "").Status)
	require.NoError(t, s.secrets.Reload(context.Background()))
	require.Equal(t, http.StatusOK, bx.do("GET", "http://svc/items", "").Status)

	writeSecret(t, s.dir, "svc-token", "rotated-secret-3\n")
	require.NoError(t, os.Chmod(filepath.Join(s.dir, "svc-token"), 0o644))
	err := s.secrets.Reload(context.Background())
	assert.ErrorIs(t, err, broker.ErrSecretSource)
	assert.ErrorContains(t, err, "chmod 600")
	require.Equal(t, http.StatusOK, bx.do("GET", "http://svc/items", "").Status)

	var got []string
	for _, r := range s.up.seen() {
		got = append(got, r.Header.Get("Authorization"))
	}
	assert.Equal(t, []string{"Bearer " + canary, "Bearer " + canary, "Bearer rotated-secret-2", "Bearer rotated-secret-2"}, got)
}

func TestSecretUnavailable(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	require.NoError(t, os.Remove(filepath.Join(s.dir, "svc-token")))
	require.NoError(t, s.secrets.Reload(context.Background()))
	a := bx.do("GET", "http://svc/items", "")
	assert.Equal(t, http.StatusBadGateway, a.Status)
	assert.Equal(t, string(broker.RuleSecret), a.Header.Get(broker.HeaderRule))
	assert.Contains(t, a.Body, `grant svc: its secret "svc-token" is unavailable on this worker`)
	assert.NotContains(t, a.Body, s.dir, "where the secrets live is for the operator's log")
	assert.Contains(t, s.logs.String(), filepath.Join(s.dir, "svc-token"))
	assert.Empty(t, s.up.seen())
	err := s.b.CheckSecrets(context.Background())
	assert.ErrorIs(t, err, broker.ErrNoSecret)
}

// TestSetPolicy: a new policy applies to the next call of a running job
// (the operator revokes a grant).
func TestSetPolicy(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	require.Equal(t, http.StatusOK, bx.do("GET", "http://svc/items", "").Status)
	narrowed := strings.Replace(strings.ReplaceAll(testPolicy, "UPSTREAM", s.up.srv.URL), `"acme": ["svc", `, `"acme": [`, 1)
	pol, err := broker.ParsePolicy([]byte(narrowed))
	require.NoError(t, err)
	require.NoError(t, s.b.SetPolicy(pol))
	a := bx.do("GET", "http://svc/items", "")
	assert.Equal(t, http.StatusForbidden, a.Status)
	assert.Equal(t, string(broker.RuleTenant), a.Header.Get(broker.HeaderRule))
	assert.ErrorIs(t, s.b.SetPolicy(nil), broker.ErrConfig)
}

func TestInFlightBounded(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *broker.Config) { c.MaxInFlight = 1 })
	bx := s.serve(acmeJob())
	slow := make(chan struct{})
	go func() {
		defer close(slow)
		if resp, err := bx.client.Get("http://svc/sleep"); err == nil {
			resp.Body.Close()
		}
	}()
	waitURI(t, s.up, "/api/sleep")
	a := bx.do("GET", "http://svc/items", "")
	assert.Equal(t, http.StatusTooManyRequests, a.Status)
	assert.Equal(t, string(broker.RuleInFlight), a.Header.Get(broker.HeaderRule))
	assert.Contains(t, a.Body, "this job already has 1 calls in progress")
	bx.stop()
	<-slow
}

func TestCallLogBounded(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	j := acmeJob()
	j.Calls = &broker.CallLog{Max: 2}
	bx := s.serve(j)
	for range 3 {
		bx.do("GET", "http://nosuch/", "")
	}
	bx.stop()
	assert.Len(t, j.Calls.Calls(), 2)
	assert.Equal(t, 1, j.Calls.Dropped())
}

func TestNewNeedsPolicyAndSecrets(t *testing.T) {
	t.Parallel()
	pol, err := broker.ParsePolicy([]byte(`{}`))
	require.NoError(t, err)
	_, err = broker.New(nil, nil, broker.Config{})
	assert.ErrorIs(t, err, broker.ErrConfig)
	_, err = broker.New(pol, nil, broker.Config{})
	assert.ErrorIs(t, err, broker.ErrConfig)
	env, err := broker.NewEnvSecrets(context.Background(), "PBTEST_NONE_")
	require.NoError(t, err)
	_, err = broker.New(pol, env, broker.Config{SigningKey: []byte("short")})
	assert.ErrorIs(t, err, broker.ErrConfig)
	_, err = broker.New(pol, env, broker.Config{MaxInFlight: -1})
	assert.ErrorIs(t, err, broker.ErrConfig)
}

// TestConnectionsBounded: past MaxConns open connections, the next waits
// for one to close.
func TestConnectionsBounded(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *broker.Config) { c.MaxConns = 1 })
	bx := s.serve(acmeJob())
	idle, err := net.Dial("unix", bx.sock)
	require.NoError(t, err)
	got := make(chan int, 1)
	go func() {
		resp, err := bx.client.Get("http://svc/items")
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	select {
	case st := <-got:
		t.Fatalf("a second connection was served (status %d) while the first was open", st)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, idle.Close())
	select {
	case st := <-got:
		assert.Equal(t, http.StatusOK, st)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was never served")
	}
}
