package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

const opToken = "op-0123456789abcdef0123456789abcdef"

// The operator's fleet page on a real Redis with a worker's heartbeat (its
// host named): only the operator token opens it. No token: 401; a
// tenant's token, by header or dashboard login: 403; the operator token,
// by header or login: the view, naming the host. The operator token opens
// no tenant's operation (403), and the MCP server does not know it.
func TestOperatorFleetOnlyWithTheOperatorToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	hb := worker.NewHeartbeat(rdb, "w-op", "paddock:", 30*time.Second)
	hb.Status = func(b *job.WorkerBeat) { b.Concurrency, b.Pool = 5, 2 }
	require.NoError(t, hb.Start(ctx))
	t.Cleanup(hb.Stop)
	view, err := scheduler.NewOperatorView(rdb, scheduler.OperatorViewConfig{})
	require.NoError(t, err)
	base := serveTest(t, bareGateway(t, func(c *Config) {
		c.OperatorToken = opToken
		c.OperatorFleet = func(ctx context.Context) (any, error) { return view.Read(ctx) }
	}).Handler())

	newAPIClient(t, base, "").call(http.MethodGet, "/v1/operator/fleet", nil, http.StatusUnauthorized)
	body := newAPIClient(t, base, devToken).call(http.MethodGet, "/v1/operator/fleet", nil, http.StatusForbidden)
	host, _ := os.Hostname()
	assert.NotContains(t, string(body), host, "a tenant learns nothing of the fleet")
	assert.Equal(t, codeForbidden, apiErrString(t, string(body)).Code)
	assert.Contains(t, string(body), "operator token")

	op := newAPIClient(t, base, opToken)
	var f scheduler.OperatorFleet
	require.NoError(t, json.Unmarshal(op.call(http.MethodGet, "/v1/operator/fleet", nil, http.StatusOK), &f))
	require.Len(t, f.Hosts, 1)
	assert.Equal(t, host, f.Hosts[0].Host)
	assert.Equal(t, 5, f.Hosts[0].Concurrency)
	assert.Equal(t, "master", f.Redis.Role)
	for _, path := range []string{"/v1/fleet", "/v1/jobs", "/v1/jobs/j1"} {
		b := op.call(http.MethodGet, path, nil, http.StatusForbidden)
		assert.Contains(t, string(b), "operator's pages only", path)
	}
	op.call(http.MethodPost, "/v1/jobs", `{"command":"echo hi"}`, http.StatusForbidden)

	// The dashboard: a tenant's login is refused there too; the operator's
	// login is the operator (no tenant) and reads the view.
	ui := newUIClient(t, base, nil)
	tenantCookie := ui.login(devToken)
	resp, b := ui.do(http.MethodGet, "/v1/operator/fleet", "", cookieHeader, tenantCookie)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, b)
	opCookie := ui.login(opToken)
	resp, b = ui.do(http.MethodGet, "/ui/session", "", cookieHeader, opCookie)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"tenant":"","token_id":"operator","operator":true}`, b)
	resp, b = ui.do(http.MethodGet, "/v1/operator/fleet", "", cookieHeader, opCookie)
	assert.Equal(t, http.StatusOK, resp.StatusCode, b)
	assert.Contains(t, b, `"host":"`+host+`"`)
	resp, _ = ui.do(http.MethodGet, "/v1/jobs", "", cookieHeader, opCookie)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)

	// MCP authenticates tenants' tokens only.
	resp, _ = ui.do(http.MethodPost, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		"Authorization", "Bearer "+opToken, "Accept", "application/json, text/event-stream")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// Without an operator token nobody is the operator: the page refuses
// every token, and a near miss of a set token is a bad token (401). A
// short operator token is refused at New.
func TestOperatorTokenConfig(t *testing.T) {
	t.Parallel()
	base := serveTest(t, bareGateway(t, nil).Handler())
	newAPIClient(t, base, devToken).call(http.MethodGet, "/v1/operator/fleet", nil, http.StatusForbidden)

	base = serveTest(t, bareGateway(t, func(c *Config) { c.OperatorToken = opToken }).Handler())
	newAPIClient(t, base, strings.TrimSuffix(opToken, "f")+"e").call(http.MethodGet, "/v1/operator/fleet", nil, http.StatusUnauthorized)
	b := newAPIClient(t, base, opToken).call(http.MethodGet, "/v1/operator/fleet", nil, http.StatusServiceUnavailable)
	assert.Contains(t, string(b), "no operator fleet view")

	_, err := New(Config{Auth: staticTokens(nil), Clients: NewPool(nil, client.Config{}), Sessions: NewMemSessions(), OperatorToken: "short"})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}
