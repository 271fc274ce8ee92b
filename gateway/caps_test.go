package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A tenant that opens named session after named session (each may hold a
// workspace of SessionMaxBytes) stops at MaxNamedSessions: the next new
// one is 429 too_many_sessions, naming the cap and what to do. Using a
// session it holds still works; ending one, or one going idle, frees its
// slot; another tenant's cap is its own.
func TestAttackNamedSessionCap(t *testing.T) {
	t.Parallel()
	f := newFleet(t, func(c *Config) { c.MaxNamedSessions = 2 })
	dev, other := newAPIClient(t, f.URL, devToken), newAPIClient(t, f.URL, otherToken)
	submit := func(a *apiClient, session string, want int) []byte {
		t.Helper()
		return a.call(http.MethodPost, "/v1/jobs?wait=2m", map[string]any{"session": session, "command": "true"}, want)
	}
	submit(dev, "a", http.StatusOK)
	submit(dev, "b", http.StatusOK)
	e := apiErr(t, submit(dev, "c", http.StatusTooManyRequests))
	assert.Equal(t, codeTooManySessions, e.Code)
	assert.Contains(t, e.Message, "holds 2 named sessions, its cap")
	assert.Contains(t, e.Message, "DELETE /v1/sessions/NAME")
	n, err := f.gw.cfg.Sessions.Count(context.Background(), "dev", SessionHTTP)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "the refused session left no record")

	submit(dev, "a", http.StatusOK) // a session it holds: not a new one
	submit(other, "a", http.StatusOK)
	submit(other, "x", http.StatusOK)

	// Over MCP (?session=), the refusal is the tool's answer.
	cs := f.connectAt(f.URL+"/mcp?session=m", devToken)
	text, isErr := call(t, cs, map[string]any{"command": "true"})
	assert.True(t, isErr)
	assert.Contains(t, text, "holds 2 named sessions, its cap")

	dev.call(http.MethodDelete, "/v1/sessions/a", nil, http.StatusNoContent)
	submit(dev, "c", http.StatusOK)
	submit(dev, "d", http.StatusTooManyRequests)

	// Sessions that went idle are ended by the sweep, and free their slots.
	f.gw.sess.skew.Store(int64(f.gw.cfg.SessionIdleTTL + time.Minute))
	f.gw.sweep(context.Background())
	f.gw.sess.skew.Store(0)
	n, err = f.gw.cfg.Sessions.Count(context.Background(), "dev", SessionHTTP)
	require.NoError(t, err)
	assert.Zero(t, n)
	submit(dev, "d", http.StatusOK)
	dev.call(http.MethodDelete, "/v1/sessions/d", nil, http.StatusNoContent)
}

// mcpConnect opens an MCP session at url as token.
func mcpConnect(t *testing.T, url, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "paddock-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: authed(token)}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

// A token that opens MCP session after MCP session (each may hold a
// workspace) stops at MaxMCPSessions: the next initialize is 429
// too_many_sessions naming the cap. Closing one frees its slot; another
// token has its own.
func TestAttackMCPSessionCap(t *testing.T) {
	t.Parallel()
	g := bareGateway(t, func(c *Config) { c.MaxMCPSessions = 2 })
	t.Cleanup(func() { // last: close what a failed check left open, wait for the watchers
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = g.CloseSessions(ctx)
		g.sess.watchers.Wait()
	})
	url := serveTest(t, g.Handler()) + "/mcp"
	first, err := mcpConnect(t, url, devToken)
	require.NoError(t, err)
	_, err = mcpConnect(t, url, devToken)
	require.NoError(t, err)

	code, retry, body := send(t, http.MethodPost, url, "",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		"Authorization", "Bearer "+devToken, "Accept", "application/json, text/event-stream")
	require.Equal(t, http.StatusTooManyRequests, code, body)
	assert.Empty(t, retry, "a slot frees when a session ends, not after a time")
	e := apiErrString(t, body)
	assert.Equal(t, codeTooManySessions, e.Code)
	assert.Contains(t, e.Message, "holds 2 MCP sessions on this gateway, its cap")
	assert.Contains(t, e.Message, "DELETE /mcp")
	_, err = mcpConnect(t, url, devToken)
	require.Error(t, err, "the SDK's client is refused too")

	_, err = mcpConnect(t, url, otherToken)
	require.NoError(t, err, "another token has its own slots")

	require.NoError(t, first.Close())
	require.Eventually(t, func() bool {
		g.mcps.mu.Lock()
		defer g.mcps.mu.Unlock()
		return g.mcps.open["token:dev-id"] == 1
	}, 30*time.Second, 10*time.Millisecond, "the closed session's slot is freed")
	_, err = mcpConnect(t, url, devToken)
	require.NoError(t, err, "a new session takes the freed slot")
	// A request of a session it holds is not a new session.
	req, err := http.NewRequest(http.MethodDelete, url, nil)
	require.NoError(t, err)
	req.Header.Set("Mcp-Session-Id", "unknown")
	resp, err := authed(devToken).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.NotEqual(t, http.StatusTooManyRequests, resp.StatusCode)
}
