package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// bareGateway is a Gateway with the fleet's tokens but no fleet: its
// tenants' NATS dials fail (nothing listens), and its sessions are in
// memory. Requests that never reach the fleet (authentication, rate
// limits, decoding) are tested on it.
func bareGateway(t testing.TB, mod func(*Config)) *Gateway {
	t.Helper()
	pool := NewPool(func(ctx context.Context, tenant string) (*nats.Conn, error) {
		return nats.Connect("nats://127.0.0.1:1", nats.Timeout(time.Second), nats.CustomInboxPrefix(job.InboxPrefix(tenant)))
	}, client.Config{})
	t.Cleanup(pool.Close)
	cfg := Config{Auth: staticTokens(map[string]string{devToken: "dev", otherToken: "other"}), Clients: pool,
		Sessions: NewMemSessions(), Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	g, err := New(cfg)
	require.NoError(t, err)
	return g
}

// serve serves h with httptest and returns its URL.
func serveTest(t testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// apiClient calls the API as one token (none: ""), every exchange checked
// against openapi.json (apiCheck).
type apiClient struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newAPIClient(t *testing.T, base, token string) *apiClient {
	var rt http.RoundTripper = newAPICheck(t, http.DefaultTransport)
	if token != "" {
		rt = bearer{token: token, rt: rt}
	}
	return &apiClient{t: t, base: base, hc: &http.Client{Transport: rt, Timeout: 5 * time.Minute}}
}

// do sends a request; body, if not nil, is sent as JSON (a string or
// []byte as it is).
func (a *apiClient) do(ctx context.Context, method, path string, body any, header ...string) *http.Response {
	a.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = strings.NewReader(string(b))
	default:
		data, err := json.Marshal(b)
		require.NoError(a.t, err)
		r = strings.NewReader(string(data))
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	require.NoError(a.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := a.hc.Do(req)
	require.NoError(a.t, err)
	return resp
}

// call sends a request, checks the status and returns the body.
func (a *apiClient) call(method, path string, body any, want int) []byte {
	a.t.Helper()
	return a.callCtx(context.Background(), method, path, body, want)
}

func (a *apiClient) callCtx(ctx context.Context, method, path string, body any, want int, header ...string) []byte {
	a.t.Helper()
	resp := a.do(ctx, method, path, body, header...)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	require.Equal(a.t, want, resp.StatusCode, "%s %s: %s", method, path, data)
	return data
}

// apiErr is the error of an error answer.
func apiErr(t *testing.T, data []byte) errorDetail {
	t.Helper()
	var b errorBody
	require.NoError(t, json.Unmarshal(data, &b), "%s", data)
	return b.Error
}

func errFields(fs []job.FieldError) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Field)
	}
	return out
}

func TestAPIAuth(t *testing.T) {
	t.Parallel()
	base := serveTest(t, bareGateway(t, nil).Handler())
	anon := newAPIClient(t, base, "")

	resp := anon.do(context.Background(), http.MethodGet, "/v1/jobs/j1", nil)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, `Bearer realm="paddock"`, resp.Header.Get("WWW-Authenticate"))
	assert.Equal(t, codeUnauthorized, apiErr(t, data).Code)

	for _, h := range []string{"Bearer wrong-token", "Basic " + devToken, "Bearer", "bearer  "} {
		resp := anon.do(context.Background(), http.MethodDelete, "/v1/jobs/j1", nil, "Authorization", h)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, h)
		assert.True(t, strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer "), h)
	}
	// The scheme is case-insensitive.
	lower := anon.callCtx(context.Background(), http.MethodDelete, "/v1/sessions/s1", nil, http.StatusNotFound,
		"Authorization", "bearer "+devToken)
	assert.Equal(t, codeNoSession, apiErr(t, lower).Code)

	// A token store that fails is not a bad token.
	down := serveTest(t, bareGateway(t, func(c *Config) {
		c.Auth = AuthFunc(func(context.Context, string) (Identity, error) { return Identity{}, errors.New("token store down") })
	}).Handler())
	resp = newAPIClient(t, down, devToken).do(context.Background(), http.MethodGet, "/v1/jobs/j1", nil)
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, codeUnavailable, apiErr(t, data).Code)
	assert.Equal(t, "5", resp.Header.Get("Retry-After"))

	// A valid token whose tenant's fleet is unreachable.
	unreachable := newAPIClient(t, base, devToken).call(http.MethodGet, "/v1/jobs/j1", nil, http.StatusServiceUnavailable)
	assert.Equal(t, codeUnavailable, apiErr(t, unreachable).Code)
	assert.Contains(t, apiErr(t, unreachable).Message, "tenant dev")
}

// TestAPISubmitRefused checks the submissions the gateway refuses itself,
// before anything reaches the fleet.
func TestAPISubmitRefused(t *testing.T) {
	t.Parallel()
	base := serveTest(t, bareGateway(t, func(c *Config) { c.MaxBodyBytes = 4096 }).Handler())
	bad := invalidOnPurpose(context.Background())
	cases := []struct {
		name   string
		body   any
		query  string
		status int
		code   string
		fields []string
		header []string
	}{
		{name: "oversized", body: `{"command":"` + strings.Repeat("x", 5000) + `"}`, status: http.StatusRequestEntityTooLarge, code: codeBodyTooLarge},
		{name: "malformed", body: `{"command": "echo hi"`, status: http.StatusBadRequest, code: codeMalformedJSON, fields: []string{"spec"}},
		{name: "not an object", body: `["echo hi"]`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"spec"}},
		{name: "unknown field", body: `{"command":"echo hi","bogus":1,"limits":{"memory":5}}`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"bogus", "limits.memory"}},
		{name: "wrong type", body: `{"command":"echo hi","limits":{"memory_mb":"big"}}`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"limits.memory_mb"}},
		{name: "another tenant", body: `{"command":"echo hi","tenant":"other"}`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"tenant"}},
		{name: "session and volume", body: `{"session":"s1","command":"echo hi","volume":{"name":"v"}}`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"volume"}},
		{name: "a session's volume by name", body: `{"command":"echo hi","volume":{"name":"sess-h-work"}}`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"volume.name"}},
		{name: "bad session name", body: `{"command":"echo hi","session":"Not_Valid"}`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"session"}},
		{name: "session not a string", body: `{"command":"echo hi","session":7}`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"session"}},
		{name: "session twice", body: `{"session":"a","command":"echo hi","session":"b"}`, status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"session"}},
		{name: "bad wait", body: `{"command":"echo hi"}`, query: "?wait=soon", status: http.StatusBadRequest, code: codeInvalidRequest, fields: []string{"wait"}},
		{name: "not JSON", body: `command=echo`, header: []string{"Content-Type", "text/plain"}, status: http.StatusUnsupportedMediaType, code: codeUnsupportedMedia},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newAPIClient(t, base, devToken)
			data := d.callCtx(bad, http.MethodPost, "/v1/jobs"+tc.query, tc.body, tc.status, tc.header...)
			e := apiErr(t, data)
			assert.Equal(t, tc.code, e.Code)
			assert.NotEmpty(t, e.Message)
			if tc.fields != nil {
				assert.Equal(t, tc.fields, errFields(e.Fields), "%s", data)
			}
		})
	}
	t.Run("body on a GET", func(t *testing.T) {
		d := newAPIClient(t, base, devToken)
		data := d.callCtx(bad, http.MethodGet, "/v1/jobs/j1", `{"x":1}`, http.StatusBadRequest)
		assert.Equal(t, codeInvalidRequest, apiErr(t, data).Code)
	})
	t.Run("bad job id", func(t *testing.T) {
		d := newAPIClient(t, base, devToken)
		data := d.callCtx(bad, http.MethodGet, "/v1/jobs/bad%20id", nil, http.StatusBadRequest)
		assert.Equal(t, []string{"id"}, errFields(apiErr(t, data).Fields))
	})
	t.Run("bad stream", func(t *testing.T) {
		d := newAPIClient(t, base, devToken)
		data := d.callCtx(bad, http.MethodGet, "/v1/jobs/j1/output/stdin", nil, http.StatusBadRequest)
		assert.Equal(t, []string{"stream"}, errFields(apiErr(t, data).Fields))
	})
}

// TestAPIRoutingErrors checks the JSON answers for paths and methods the
// API does not have (not operations of the document: sent unchecked).
func TestAPIRoutingErrors(t *testing.T) {
	t.Parallel()
	base := serveTest(t, bareGateway(t, nil).Handler())
	hc := &http.Client{Transport: bearer{token: devToken, rt: http.DefaultTransport}}
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{http.MethodGet, "/v1/nothing", http.StatusNotFound, codeNotFound, ""},
		{http.MethodPut, "/v1/jobs", http.StatusMethodNotAllowed, codeMethodNotAllowed, "POST, GET"},
		{http.MethodPost, "/v1/jobs/j1", http.StatusMethodNotAllowed, codeMethodNotAllowed, "GET, DELETE"},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, nil)
		require.NoError(t, err)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, tc.status, resp.StatusCode, tc.path)
		assert.Equal(t, tc.code, apiErr(t, data).Code)
		assert.Equal(t, tc.allow, resp.Header.Get("Allow"))
	}
}

func TestAPIRateLimit(t *testing.T) {
	t.Parallel()
	const burst = 3
	base := serveTest(t, bareGateway(t, func(c *Config) { c.Rate, c.Burst = 0.001, burst }).Handler())
	dev := newAPIClient(t, base, devToken)
	limited := 0
	for range burst + 1 {
		resp := dev.do(context.Background(), http.MethodDelete, "/v1/sessions/none", nil)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			limited++
			assert.Equal(t, codeRateLimited, apiErr(t, data).Code)
			s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
			assert.Positive(t, s)
			continue
		}
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", data)
	}
	assert.Equal(t, 1, limited, "burst+1 quick requests: exactly one refused")
	// The limit is per token.
	newAPIClient(t, base, otherToken).call(http.MethodDelete, "/v1/sessions/none", nil, http.StatusNotFound)
}

// TestAPIJobs runs jobs through the API on a real fleet.
func TestAPIJobs(t *testing.T) {
	f := newFleet(t, nil)
	t.Run("wait", func(t *testing.T) { t.Parallel(); testAPIWait(t, f) })
	t.Run("isolation", func(t *testing.T) { t.Parallel(); testAPIIsolation(t, f) })
	t.Run("follow", func(t *testing.T) { t.Parallel(); testAPIFollow(t, f) })
	t.Run("cancel", func(t *testing.T) { t.Parallel(); testAPICancel(t, f) })
	t.Run("streams", func(t *testing.T) { t.Parallel(); testAPIStreamLimit(t, f) })
	t.Run("session", func(t *testing.T) { t.Parallel(); testAPISession(t, f) })
}

func resultOf(t *testing.T, data []byte) job.Result {
	t.Helper()
	var r job.Result
	require.NoError(t, json.Unmarshal(data, &r), "%s", data)
	return r
}

func testAPIWait(t *testing.T, f *fleet) {
	dev := newAPIClient(t, f.URL, devToken)
	r := resultOf(t, dev.call(http.MethodPost, "/v1/jobs?wait=2m", map[string]any{"command": "echo hello", "tenant": "dev"}, http.StatusOK))
	assert.Equal(t, job.StateSucceeded, r.State)
	assert.Equal(t, "hello\n", r.Stdout.Text)
	assert.Equal(t, "dev", r.Tenant)
	require.NotNil(t, r.Limits)
	assert.Len(t, r.Attempts, 1)

	// The client's checks answer 400 too.
	e := apiErr(t, dev.callCtx(invalidOnPurpose(context.Background()), http.MethodPost, "/v1/jobs", map[string]any{"image": "x"}, http.StatusBadRequest))
	assert.Equal(t, []string{"command"}, errFields(e.Fields))

	got := resultOf(t, dev.call(http.MethodGet, "/v1/jobs/"+r.ID, nil, http.StatusOK))
	assert.Equal(t, r.ID, got.ID)
	assert.Equal(t, r.Stdout, got.Stdout)

	// The same id again runs once.
	resp := dev.do(context.Background(), http.MethodPost, "/v1/jobs", map[string]any{"id": r.ID, "command": "echo again"})
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s", data)
	var acc accepted
	require.NoError(t, json.Unmarshal(data, &acc))
	assert.Equal(t, accepted{ID: r.ID, Tenant: "dev", State: "queued", Duplicate: true}, acc)
	assert.Equal(t, "/v1/jobs/"+r.ID, resp.Header.Get("Location"))

	// A wait that ends before the job: 202, then the result comes.
	data = dev.call(http.MethodPost, "/v1/jobs?wait=1", map[string]any{"command": "sleep 3; echo late", "heal": map[string]any{"max_attempts": 1}}, http.StatusAccepted)
	acc = accepted{}
	require.NoError(t, json.Unmarshal(data, &acc))
	assert.False(t, acc.Duplicate)
	e = apiErr(t, dev.call(http.MethodGet, "/v1/jobs/"+acc.ID, nil, http.StatusNotFound))
	assert.Equal(t, codeNoResult, e.Code)
	late := resultOf(t, dev.call(http.MethodGet, "/v1/jobs/"+acc.ID+"?wait=2m", nil, http.StatusOK))
	assert.Equal(t, "late\n", late.Stdout.Text)
}

// testAPIIsolation: another tenant's job is unknown to every operation.
func testAPIIsolation(t *testing.T, f *fleet) {
	dev, other := newAPIClient(t, f.URL, devToken), newAPIClient(t, f.URL, otherToken)
	spec := map[string]any{"command": "mkdir -p out && printf 'report\\n' > out/a.txt && echo done",
		"artifacts": []string{"out/*.txt"}, "output": map[string]any{"keep": true}}
	r := resultOf(t, dev.call(http.MethodPost, "/v1/jobs?wait=2m", spec, http.StatusOK))
	require.Equal(t, job.StateSucceeded, r.State, "%+v", r)
	require.Len(t, r.Artifacts, 1)

	paths := map[string]string{
		"GET /v1/jobs/" + r.ID:                          codeNoResult,
		"GET /v1/jobs/" + r.ID + "?wait=1s":             codeNoResult,
		"GET /v1/jobs/" + r.ID + "/output/stdout":       codeNoResult,
		"GET /v1/jobs/" + r.ID + "/artifacts":           codeNoResult,
		"GET /v1/jobs/" + r.ID + "/artifacts/out/a.txt": codeNoResult,
		"DELETE /v1/jobs/" + r.ID:                       codeNotFound,
	}
	for op, code := range paths {
		method, path, _ := strings.Cut(op, " ")
		e := apiErr(t, other.call(method, path, nil, http.StatusNotFound))
		assert.Equal(t, code, e.Code, op)
	}

	// dev reads all of it.
	stdout := dev.call(http.MethodGet, "/v1/jobs/"+r.ID+"/output/stdout", nil, http.StatusOK)
	assert.Equal(t, "done\n", string(stdout))
	var list artifactList
	require.NoError(t, json.Unmarshal(dev.call(http.MethodGet, "/v1/jobs/"+r.ID+"/artifacts", nil, http.StatusOK), &list))
	require.Len(t, list.Artifacts, 1)
	assert.Equal(t, "out/a.txt", list.Artifacts[0].Path)
	assert.Empty(t, list.Refused)
	resp := dev.do(context.Background(), http.MethodGet, "/v1/jobs/"+r.ID+"/artifacts/out/a.txt", nil)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "report\n", string(body))
	sum := sha256.Sum256(body)
	assert.Equal(t, strconv.Quote(hex.EncodeToString(sum[:])), resp.Header.Get("ETag"))
	assert.Equal(t, `attachment; filename=a.txt`, resp.Header.Get("Content-Disposition"))
	assert.Equal(t, int64(len(body)), resp.ContentLength)

	e := apiErr(t, dev.call(http.MethodGet, "/v1/jobs/"+r.ID+"/artifacts/out/b.txt", nil, http.StatusNotFound))
	assert.Equal(t, codeNotArtifact, e.Code)
	plain := resultOf(t, dev.call(http.MethodPost, "/v1/jobs?wait=2m", map[string]any{"command": "echo x", "output": map[string]any{"keep": false}}, http.StatusOK))
	e = apiErr(t, dev.call(http.MethodGet, "/v1/jobs/"+plain.ID+"/output/stderr", nil, http.StatusNotFound))
	assert.Equal(t, codeNotKept, e.Code)
}

// sseStream reads an event stream one event at a time.
type sseStream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func openEvents(t *testing.T, a *apiClient, ctx context.Context, id string, header ...string) *sseStream {
	t.Helper()
	resp := a.do(ctx, http.MethodGet, "/v1/jobs/"+id+"/events", nil, header...)
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
	}
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &sseStream{resp: resp, sc: sc}
}

// next returns the next event (comments skipped); ok is false at the end.
func (s *sseStream) next() (ev parsedEvent, ok bool) {
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "" && ev.name != "":
			return ev, true
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
	return ev, false
}

// testAPIFollow: a job's output arrives while it runs, before its result.
// The job waits for a file the test writes in its volume once it has seen
// the first line, so the order cannot come from timing.
func testAPIFollow(t *testing.T, f *fleet) {
	dev := newAPIClient(t, f.URL, devToken)
	vol := "follow-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	spec := map[string]any{"command": "echo first; while [ ! -e /workspace/go ]; do sleep 0.1; done; printf 'second\\nthird\\n' >&2",
		"volume": map[string]any{"name": vol}, "heal": map[string]any{"mode": "off"}}
	var acc accepted
	require.NoError(t, json.Unmarshal(dev.call(http.MethodPost, "/v1/jobs", spec, http.StatusAccepted), &acc))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := openEvents(t, dev, ctx, acc.ID)

	ev, ok := s.next()
	require.True(t, ok)
	require.Equal(t, "output", ev.name, ev.data)
	var out outputEvent
	require.NoError(t, json.Unmarshal([]byte(ev.data), &out))
	assert.Equal(t, outputEvent{Stream: "stdout", Seq: 1, Run: 1, Data: "first\n"}, out)
	assert.Equal(t, "1.1", ev.id)
	firstID := ev.id
	// The job is still running: it has no result.
	e := apiErr(t, dev.call(http.MethodGet, "/v1/jobs/"+acc.ID, nil, http.StatusNotFound))
	require.Equal(t, codeNoResult, e.Code)
	require.NoError(t, os.WriteFile(filepath.Join(f.volumeDir("dev", vol), "go"), nil, 0o644))

	var stderr strings.Builder
	var res job.Result
	for {
		ev, ok := s.next()
		require.True(t, ok, "the stream ended before the result")
		if ev.name == "result" {
			res = resultOf(t, []byte(ev.data))
			break
		}
		require.Equal(t, "output", ev.name, ev.data)
		require.NoError(t, json.Unmarshal([]byte(ev.data), &out))
		assert.Equal(t, "stderr", out.Stream)
		stderr.WriteString(out.Data)
	}
	assert.Equal(t, "second\nthird\n", stderr.String())
	assert.Equal(t, job.StateSucceeded, res.State)
	_, more := s.next()
	assert.False(t, more, "the stream closes after the result")

	// Resuming after the first event replays the rest only.
	s = openEvents(t, dev, ctx, acc.ID, "Last-Event-ID", firstID)
	var names []string
	for ev, ok := s.next(); ok; ev, ok = s.next() {
		names = append(names, ev.name)
		if ev.name == "output" {
			require.NoError(t, json.Unmarshal([]byte(ev.data), &out))
			assert.Equal(t, "stderr", out.Stream, "the first line is not sent again")
		}
	}
	require.NotEmpty(t, names)
	assert.Equal(t, "result", names[len(names)-1])
}

// testAPICancel: a running job canceled through the API ends canceled.
func testAPICancel(t *testing.T, f *fleet) {
	dev := newAPIClient(t, f.URL, devToken)
	var acc accepted
	require.NoError(t, json.Unmarshal(dev.call(http.MethodPost, "/v1/jobs",
		map[string]any{"command": "echo started; sleep 60", "heal": map[string]any{"mode": "off"}}, http.StatusAccepted), &acc))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := openEvents(t, dev, ctx, acc.ID)
	ev, ok := s.next()
	require.True(t, ok)
	require.Equal(t, "output", ev.name, "the job runs") // its first line is out

	var reply job.CancelReply
	require.NoError(t, json.Unmarshal(dev.call(http.MethodDelete, "/v1/jobs/"+acc.ID, nil, http.StatusAccepted), &reply))
	assert.Equal(t, job.CancelKilling, reply.Outcome)
	r := resultOf(t, dev.call(http.MethodGet, "/v1/jobs/"+acc.ID+"?wait=2m", nil, http.StatusOK))
	assert.Equal(t, job.StateCanceled, r.State)
	assert.Equal(t, job.ReasonCanceled, r.Reason)
	for ok && ev.name != "result" {
		ev, ok = s.next()
	}
	require.True(t, ok, "the event stream ends with the result")
	assert.Equal(t, job.StateCanceled, resultOf(t, []byte(ev.data)).State)

	require.NoError(t, json.Unmarshal(dev.call(http.MethodDelete, "/v1/jobs/"+acc.ID, nil, http.StatusOK), &reply))
	assert.Equal(t, job.CancelFinished, reply.Outcome)
	assert.Equal(t, job.StateCanceled, reply.State)
}

// testAPIStreamLimit: a token holds at most MaxStreams event streams.
func testAPIStreamLimit(t *testing.T, f *fleet) {
	cfg := f.gw.cfg
	cfg.MaxStreams = 1
	g, err := New(cfg)
	require.NoError(t, err)
	dev := newAPIClient(t, serveTest(t, g.Handler()), devToken)
	ctx, cancel := context.WithCancel(context.Background())
	s := openEvents(t, dev, ctx, "never-submitted") // streams pings until closed
	// A refusal is immediate; a stream would run to the deadline.
	over, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	resp := dev.do(over, http.MethodGet, "/v1/jobs/other-id/events", nil)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", data)
	assert.Equal(t, codeTooManyStreams, apiErr(t, data).Code)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	// Another token is not limited by it.
	o := openEvents(t, newAPIClient(t, dev.base, otherToken), ctx, "other-id")

	cancel()
	s.resp.Body.Close()
	o.resp.Body.Close()
	require.Eventually(t, func() bool { return g.lim.size() > 0 && streamsOf(g, "token:dev-id") == 0 }, time.Minute, 10*time.Millisecond,
		"a closed stream is released")
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	openEvents(t, dev, ctx2, "never-submitted")
}

func streamsOf(g *Gateway, key string) int {
	g.lim.mu.Lock()
	defer g.lim.mu.Unlock()
	if e := g.lim.entries[key]; e != nil {
		return e.streams
	}
	return 0
}

// testAPISession: jobs of one session share its workspace until it ends.
func testAPISession(t *testing.T, f *fleet) {
	dev, other := newAPIClient(t, f.URL, devToken), newAPIClient(t, f.URL, otherToken)
	name := "s-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	r := resultOf(t, dev.call(http.MethodPost, "/v1/jobs?wait=2m", map[string]any{"session": name, "command": "echo kept > /workspace/f"}, http.StatusOK))
	require.Equal(t, job.StateSucceeded, r.State, "%+v", r)
	assert.Equal(t, name, r.Labels[LabelSession])
	r = resultOf(t, dev.call(http.MethodPost, "/v1/jobs?wait=2m", map[string]any{"command": "cat /workspace/f", "session": name}, http.StatusOK))
	assert.Equal(t, "kept\n", r.Stdout.Text)
	// Another tenant's session of the same name is another workspace.
	r = resultOf(t, other.call(http.MethodPost, "/v1/jobs?wait=2m", map[string]any{"command": "cat /workspace/f", "session": name}, http.StatusOK))
	assert.Equal(t, job.StateFailed, r.State)

	e := apiErr(t, other.call(http.MethodDelete, "/v1/sessions/nope-"+name, nil, http.StatusNotFound))
	assert.Equal(t, codeNoSession, e.Code)
	dev.call(http.MethodDelete, "/v1/sessions/"+name, nil, http.StatusNoContent)
	e = apiErr(t, dev.call(http.MethodDelete, "/v1/sessions/"+name, nil, http.StatusNotFound))
	assert.Equal(t, codeNoSession, e.Code)
	r = resultOf(t, dev.call(http.MethodPost, "/v1/jobs?wait=2m", map[string]any{"command": "ls -A /workspace", "session": name}, http.StatusOK))
	assert.Equal(t, "", strings.TrimSpace(strings.ReplaceAll(r.Stdout.Text, ".paddock\n", "")), "a new session of the name starts empty")
	dev.call(http.MethodDelete, "/v1/sessions/"+name, nil, http.StatusNoContent)
	other.call(http.MethodDelete, "/v1/sessions/"+name, nil, http.StatusNoContent)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: j1", client.ErrNotFinished), http.StatusNotFound, codeNoResult},
		{&client.NotKeptError{ID: "j1", What: "stdout", Finished: false}, http.StatusNotFound, codeNoResult},
		{&client.NotKeptError{ID: "j1", What: "stdout", Finished: true}, http.StatusNotFound, codeNotKept},
		{fmt.Errorf("%w: x", client.ErrNotArtifact), http.StatusNotFound, codeNotArtifact},
		{fmt.Errorf("%w: s", ErrNoSession), http.StatusNotFound, codeNoSession},
		{fmt.Errorf("%w: s", ErrSessionEnding), http.StatusConflict, codeSessionEnding},
		{&SessionCapError{Tenant: "dev", Cap: 2}, http.StatusTooManyRequests, codeTooManySessions},
		{&job.ValidationError{Fields: []job.FieldError{{Field: "id", Message: "bad"}}}, http.StatusBadRequest, codeInvalidRequest},
		{&client.QuotaError{Tenant: "dev", Quota: client.QuotaMaxQueued}, http.StatusTooManyRequests, codeQuota},
		{&client.StreamFullError{Stream: "s"}, http.StatusServiceUnavailable, codeStreamFull},
		{&client.PermissionError{Tenant: "dev"}, http.StatusForbidden, codeForbidden},
		{&client.NoStreamError{Stream: "s", Tenant: "dev"}, http.StatusServiceUnavailable, codeNoStream},
		{fmt.Errorf("%w (j1)", client.ErrNoCanceler), http.StatusServiceUnavailable, codeUnavailable},
		{&WorkspaceError{Tenant: "dev", Err: context.DeadlineExceeded}, http.StatusServiceUnavailable, codeUnavailable},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, codeTimeout},
		{errors.New("boom"), http.StatusInternalServerError, codeInternal},
	}
	for _, tc := range cases {
		e := classify(tc.err)
		assert.Equal(t, tc.status, e.Status, "%v", tc.err)
		assert.Equal(t, tc.code, e.Code, "%v", tc.err)
		assert.NotEmpty(t, e.Message)
	}
	assert.Equal(t, []job.FieldError{{Field: "id", Message: "bad"}}, classify(cases[7].err).Fields)
}

func TestParseWait(t *testing.T) {
	t.Parallel()
	max := 330 * time.Second
	for in, want := range map[string]time.Duration{"": 0, "0": 0, "30": 30 * time.Second, "1.5s": 1500 * time.Millisecond,
		"2m": 2 * time.Minute, "1h": max, "99999": max} {
		got, err := parseWait(in, max)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"soon", "-1s", "-5", "1e3", "30 s"} {
		_, err := parseWait(in, max)
		assert.Error(t, err, in)
	}
}

func TestSplitSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, session, spec string }{
		{`{"command":"x"}`, "", `{"command":"x"}`},
		{`{"session":"s1","command":"x"}`, "s1", `{"command":"x"}`},
		{`{ "session" : "s1" , "command":"x"}`, "s1", `{  "command":"x"}`},
		{`{"command":"x", "session":"s1"}`, "s1", `{"command":"x"}`},
		{`{"command":"x","session":"s1","image":"i"}`, "s1", `{"command":"x","image":"i"}`},
		{`{"session":"s1"}`, "s1", `{}`},
		{`{"sess\u0069on":"s1","command":"x"}`, "s1", `{"command":"x"}`},
		{`{"labels":{"session":"keep"},"command":"x"}`, "", `{"labels":{"session":"keep"},"command":"x"}`},
		{`{"command":"x"`, "", `{"command":"x"`}, // malformed: left to job.Decode
	} {
		session, spec, err := splitSession([]byte(tc.in))
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.session, session, tc.in)
		assert.Equal(t, tc.spec, string(spec), tc.in)
	}
	for _, in := range []string{`{"session":""}`, `{"session":1}`, `{"session":"a","session":"b"}`, `{"session":null}`} {
		_, _, err := splitSession([]byte(in))
		assert.Error(t, err, in)
	}
}

// FuzzSplitSession: whatever the document, the spec left is valid JSON
// when the document was, and differs only by the session member.
func FuzzSplitSession(f *testing.F) {
	for _, s := range []string{`{"session":"s1","command":"x"}`, `{"command":"x","session":"a"}`, `{}`, `[1]`, `{"a":{"session":1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		session, spec, err := splitSession(data)
		if err != nil {
			return
		}
		if !json.Valid(data) || session == "" {
			if string(spec) != string(data) {
				t.Fatalf("a document without session changed: %q → %q", data, spec)
			}
			return
		}
		if !json.Valid(spec) {
			t.Fatalf("the spec of %q is not JSON: %q", data, spec)
		}
		var in, out map[string]json.RawMessage
		if json.Unmarshal(data, &in) != nil || json.Unmarshal(spec, &out) != nil {
			return // not objects of unique keys
		}
		delete(in, "session")
		if len(in) != len(out) {
			t.Fatalf("%q → %q: members lost or added", data, spec)
		}
	})
}

func TestUTF8Joiner(t *testing.T) {
	t.Parallel()
	text := "héllo wörld — 😀 done\n"
	for cut := 0; cut <= len(text); cut++ {
		var j utf8Joiner
		got := j.join("stdout", []byte(text[:cut])) + j.join("stdout", []byte(text[cut:]))
		assert.Equal(t, text, got, "cut at %d", cut)
		assert.Empty(t, j.rest())
	}
	var j utf8Joiner
	assert.Equal(t, "a", j.join("stdout", []byte("a\xf0\x9f")))
	assert.Equal(t, "b", j.join("stderr", []byte("b")), "streams are joined apart")
	assert.Equal(t, map[string][]byte{"stdout": []byte("\xf0\x9f")}, j.rest())
}

// TestServerTimeouts checks NewServer's bounds on a real listener.
func TestServerTimeouts(t *testing.T) {
	srv := NewServer("127.0.0.1:0", nil)
	assert.Equal(t, ReadHeaderTimeout, srv.ReadHeaderTimeout)
	assert.Equal(t, 5*time.Second, srv.ReadHeaderTimeout)
	assert.Equal(t, ReadTimeout, srv.ReadTimeout)
	assert.Equal(t, time.Duration(0), srv.WriteTimeout, "no WriteTimeout: it would cut event streams")
	assert.Equal(t, 64<<10, srv.MaxHeaderBytes)
	assert.Positive(t, srv.IdleTimeout)
}

// startServer serves h with NewServer on 127.0.0.1:0; mod changes the
// server first (short timeouts for tests).
func startNewServer(t *testing.T, h http.Handler, mod func(*http.Server)) string {
	t.Helper()
	srv := NewServer("127.0.0.1:0", h)
	if mod != nil {
		mod(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestServerSlowloris: clients that send their headers a byte at a time
// are cut at ReadHeaderTimeout, do not keep a normal request from being
// served, and leave no goroutine behind.
func TestServerSlowloris(t *testing.T) {
	baseline := runtime.NumGoroutine()
	g := bareGateway(t, nil)
	addr := startNewServer(t, g.Handler(), func(s *http.Server) { s.ReadHeaderTimeout = time.Second })
	const slow = 20
	header := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200) + "\r\n\r\n"
	var wg sync.WaitGroup
	connected := make(chan struct{}, slow)
	cut := make(chan int, slow) // the bytes each slow client sent before it was cut
	for range slow {
		wg.Go(func() {
			conn, err := net.Dial("tcp", addr)
			if !assert.NoError(t, err) {
				return
			}
			defer conn.Close()
			closed := make(chan struct{})
			go func() { // the server closing the connection ends this read
				_, _ = conn.Read(make([]byte, 1))
				close(closed)
			}()
			connected <- struct{}{}
			for i := 0; i < len(header); i++ {
				if _, err := conn.Write([]byte{header[i]}); err != nil {
					cut <- i
					return
				}
				select {
				case <-closed:
					cut <- i + 1
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			cut <- len(header)
		})
	}
	for range slow {
		<-connected
	}
	// A normal request meanwhile.
	resp, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok\n", string(body))
	wg.Wait()
	close(cut)
	for n := range cut {
		assert.Less(t, n, len(header), "a slow client was served instead of cut")
	}
	http.DefaultClient.CloseIdleConnections()
	assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseline+2 }, 10*time.Second, 20*time.Millisecond,
		"goroutines back to the baseline (%d)", baseline)
}

// TestServerLongRequests: a request that outlives ReadTimeout (a long
// wait, an event stream) keeps its context once its body has been read,
// and its answer is not cut: NewServer sets no WriteTimeout, and a write
// deadline a previous request on the connection set is gone.
func TestServerLongRequests(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/short" { // a short write deadline, left on the connection
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.WriteString(w, "short")
			return
		}
		select {
		case <-r.Context().Done():
			_, _ = io.WriteString(w, "canceled")
		case <-time.After(1500 * time.Millisecond): // 3 times ReadTimeout
			_, _ = io.WriteString(w, "alive")
		}
	})
	addr := startNewServer(t, h, func(s *http.Server) {
		if s.ReadTimeout != ReadTimeout || s.WriteTimeout != 0 {
			t.Errorf("NewServer's ReadTimeout is %s, WriteTimeout %s", s.ReadTimeout, s.WriteTimeout)
		}
		s.ReadTimeout = 500 * time.Millisecond
	})
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}} // one keep-alive connection
	defer hc.CloseIdleConnections()
	for _, body := range []io.Reader{nil, strings.NewReader(`{"command":"x"}`)} {
		method := http.MethodGet
		if body != nil {
			method = http.MethodPost
		}
		resp, err := hc.Get("http://" + addr + "/short")
		require.NoError(t, err)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, "short", string(data))
		req, err := http.NewRequest(method, "http://"+addr+"/", body)
		require.NoError(t, err)
		resp, err = hc.Do(req)
		require.NoError(t, err, method)
		data, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, "alive", string(data), method)
	}
}

// TestServerSlowBody: a body that does not arrive within ReadTimeout is
// refused (408), and a header block over MaxHeaderBytes is refused (431).
func TestServerSlowBody(t *testing.T) {
	t.Parallel()
	g := bareGateway(t, nil)
	addr := startNewServer(t, g.Handler(), func(s *http.Server) { s.ReadTimeout = 500 * time.Millisecond })
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", devToken)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "%s", data)
	assert.Equal(t, codeRequestTimeout, apiErr(t, data).Code)

	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("b", 100<<10))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	http.DefaultClient.CloseIdleConnections()
}

func TestParseEventID(t *testing.T) {
	t.Parallel()
	assert.Equal(t, eventID{run: 2, seq: 17}, parseEventID("2.17"))
	for _, v := range []string{"", "17", "a.b", "1.-1", "-1.2", "1.2.3"} {
		assert.Equal(t, eventID{}, parseEventID(v), v)
	}
	assert.True(t, eventID{2, 1}.after(eventID{1, 9}))
	assert.True(t, eventID{1, 2}.after(eventID{1, 1}))
	assert.False(t, eventID{1, 1}.after(eventID{1, 1}))
}

// BenchmarkAPIRequest is the gateway's own cost of one authenticated
// request that needs no fleet: routing, the token check, the rate limit,
// the session store, the JSON error answer.
func BenchmarkAPIRequest(b *testing.B) {
	g := bareGateway(b, func(c *Config) { c.Rate, c.Burst = 1e9, 1<<30 })
	h := g.Handler()
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodDelete, "/v1/sessions/none", nil)
		req.Header.Set("Authorization", "Bearer "+devToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			b.Fatal(rec.Code, rec.Body.String())
		}
	}
}
