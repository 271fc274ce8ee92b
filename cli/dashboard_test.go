package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
)

// On a real `paddock up`, the dashboard's data is wired end to end: the
// list service answers next to the scheduler, the gateway reads the span
// file for a job's trace, and the fleet view reads Redis.
func TestDashboardDataOnUp(t *testing.T) {
	s := startUp(t)
	m := gatewayURLRE.FindStringSubmatch(s.stderr.String())
	require.NotNil(t, m, "paddock up did not say where its gateway is:\n%s", s.stderr)
	base, token := m[1], readDevToken(t, s.dir)
	call := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, data
	}
	code, data := call(http.MethodPost, "/v1/jobs?wait=60s", `{"id":"dash-1","command":"echo hi","labels":{"k":"v"}}`)
	require.Equal(t, http.StatusOK, code, "%s", data)

	code, data = call(http.MethodGet, "/v1/jobs?label=k=v", "")
	require.Equal(t, http.StatusOK, code, "%s", data)
	var page job.ListPage
	require.NoError(t, json.Unmarshal(data, &page))
	require.Len(t, page.Jobs, 1, "%s", data)
	assert.Equal(t, "dash-1", page.Jobs[0].ID)
	assert.Equal(t, job.StateSucceeded, page.Jobs[0].State)

	// The spans reach the file when their batch is exported: poll.
	var names []string
	require.Eventually(t, func() bool {
		code, data := call(http.MethodGet, "/v1/jobs/dash-1/trace", "")
		require.Equal(t, http.StatusOK, code, "%s", data)
		var tr struct {
			Spans []struct{ Name string } `json:"spans"`
		}
		require.NoError(t, json.Unmarshal(data, &tr))
		names = names[:0]
		for _, sp := range tr.Spans {
			names = append(names, sp.Name)
		}
		return slices.Contains(names, "paddock.submit") && slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "attempt") })
	}, 60*time.Second, 200*time.Millisecond, "submit and attempt spans; got %v", names)
	t.Logf("spans: %v", names)

	code, data = call(http.MethodGet, "/v1/fleet", "")
	require.Equal(t, http.StatusOK, code, "%s", data)
	var fleet scheduler.Fleet
	require.NoError(t, json.Unmarshal(data, &fleet))
	require.NotEmpty(t, fleet.Workers, "%s", data)
	assert.True(t, fleet.Workers[0].Alive)
	assert.Positive(t, fleet.Capacity.Slots)
	assert.Equal(t, "dev", fleet.Tenant)
	assert.NotEmpty(t, fleet.Reasons, "the ok just recorded")
	assert.NotContains(t, string(data), "dash-1", "the fleet view names no job")

	// A dashboard login and a named session, with the gateway service
	// user's real NATS permissions: the login's record and the session
	// count live in its sessions bucket.
	testLoginOnUp(t, base, token)
	code, data = call(http.MethodPost, "/v1/jobs?wait=60s", `{"command":"true","session":"dash-s"}`)
	require.Equal(t, http.StatusOK, code, "%s", data)
	code, data = call(http.MethodDelete, "/v1/sessions/dash-s", "")
	require.Equal(t, http.StatusNoContent, code, "%s", data)
}

// testLoginOnUp logs in to the dashboard of a `paddock up` over plain
// HTTP on loopback (the cookie goes without Secure there), uses the
// cookie, logs out, and finds the cookie refused.
func testLoginOnUp(t *testing.T, base, token string) {
	t.Helper()
	send := func(method, path, body, cookie string) *http.Response {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("X-Paddock-CSRF", "1")
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp := send(http.MethodPost, "/ui/login", `{"token":"`+token+`"}`, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "paddock_session" {
			cookie = c
		}
	}
	require.NotNil(t, cookie)
	assert.NotContains(t, cookie.Value, token)
	assert.False(t, cookie.Secure, "paddock up's gateway is plain HTTP on loopback")
	assert.True(t, cookie.HttpOnly)
	header := "paddock_session=" + cookie.Value
	assert.Equal(t, http.StatusOK, send(http.MethodGet, "/v1/fleet", "", header).StatusCode)
	assert.Equal(t, http.StatusNoContent, send(http.MethodPost, "/ui/logout", "", header).StatusCode)
	assert.Equal(t, http.StatusUnauthorized, send(http.MethodGet, "/v1/fleet", "", header).StatusCode)
}
