package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// The job events of GET /v1/events are checked against JobSummary by the
// OpenAPI check like the other streams' events.
func init() { sseSchemas["job"] = "JobSummary" }

// fakeSpans answers Config.Spans as the span file would for any job id: one
// trace of tenant dev and one of tenant other, both naming the id (ids are
// unique per tenant only).
func fakeSpans(_ context.Context, id string) ([]Span, error) {
	at := time.Now().Add(-time.Minute).UTC()
	span := func(trace, sid, parent, name, tenant string, off time.Duration) Span {
		attrs := map[string]any{job.AttrJobID: id}
		if tenant != "" {
			attrs[job.AttrTenant] = tenant
		}
		return Span{TraceID: trace, SpanID: sid, ParentID: parent, Name: name, Start: at.Add(off), End: at.Add(off + time.Second), Status: "ok", Attrs: attrs}
	}
	return []Span{
		span("t-dev", "s2", "s1", "paddock.attempt", "", 2*time.Second),
		span("t-dev", "s1", "", "paddock.submit", "dev", 0),
		span("t-other", "o1", "", "paddock.submit", "other", 0),
	}, nil
}

// TestAPIDashboard runs the dashboard's data endpoints on a real fleet.
func TestAPIDashboard(t *testing.T) {
	f := newFleet(t, func(c *Config) {
		c.Spans = fakeSpans
		c.Fleet = func(_ context.Context, tenant string) (any, error) {
			return map[string]any{"tenant": tenant, "workers": []any{}, "capacity": map[string]int{"workers_alive": 0, "slots": 0},
				"queues": []any{}, "reasons": []any{}}, nil
		}
	})
	// First and alone: it fills the worker's two slots to hold a job queued.
	t.Run("events", func(t *testing.T) { testAPIJobEvents(t, f) })
	t.Run("list", func(t *testing.T) { t.Parallel(); testAPIList(t, f) })
	t.Run("trace", func(t *testing.T) { t.Parallel(); testAPITrace(t, f) })
	t.Run("events-cap", func(t *testing.T) { t.Parallel(); testAPIJobEventsCap(t, f) })
	t.Run("fleet", func(t *testing.T) {
		t.Parallel()
		data := newAPIClient(t, f.URL, devToken).call(http.MethodGet, "/v1/fleet", nil, http.StatusOK)
		assert.Contains(t, string(data), `"tenant":"dev"`, "the view is asked for the caller's tenant")
	})
}

func listPage(t *testing.T, a *apiClient, query url.Values, want int) job.ListPage {
	t.Helper()
	var page job.ListPage
	require.NoError(t, json.Unmarshal(a.call(http.MethodGet, "/v1/jobs?"+query.Encode(), nil, want), &page))
	return page
}

func submitWait(t *testing.T, a *apiClient, spec map[string]any) job.Result {
	t.Helper()
	return resultOf(t, a.call(http.MethodPost, "/v1/jobs?wait=120s", spec, http.StatusOK))
}

// testAPIList: the list shows the tenant's jobs only, filtered and paged.
func testAPIList(t *testing.T, f *fleet) {
	dev := newAPIClient(t, f.URL, devToken)
	other := newAPIClient(t, f.URL, otherToken)
	run := "l" + strconv.FormatInt(time.Now().UnixNano(), 36)
	heal := map[string]any{"mode": "off"}
	submitWait(t, dev, map[string]any{"id": run + "-ok", "command": "true", "labels": map[string]any{"run": run, "kind": "good"}, "heal": heal})
	submitWait(t, dev, map[string]any{"id": run + "-bad", "command": "exit 3", "labels": map[string]any{"run": run, "kind": "bad"}, "heal": heal})
	submitWait(t, other, map[string]any{"id": run + "-theirs", "command": "true", "labels": map[string]any{"run": run}, "heal": heal})

	page := listPage(t, dev, url.Values{"q": {run}}, http.StatusOK)
	require.Len(t, page.Jobs, 2, "dev's two jobs, not other's")
	assert.Equal(t, run+"-bad", page.Jobs[0].ID, "newest first")
	assert.Equal(t, run+"-ok", page.Jobs[1].ID)
	bad := page.Jobs[0]
	assert.Equal(t, job.StateFailed, bad.State)
	assert.Equal(t, job.ReasonExitNonzero, bad.Reason)
	require.NotNil(t, bad.ExitCode)
	assert.Equal(t, 3, *bad.ExitCode)
	assert.Equal(t, "exit 3", bad.Command)
	assert.Equal(t, 1, bad.Runs)
	assert.False(t, bad.QueuedAt.IsZero() || bad.StartedAt.IsZero() || bad.FinishedAt.IsZero(), "%+v", bad)
	assert.Equal(t, "dev", bad.Tenant)

	page = listPage(t, dev, url.Values{"label": {"run=" + run}, "state": {"succeeded"}}, http.StatusOK)
	require.Len(t, page.Jobs, 1)
	assert.Equal(t, run+"-ok", page.Jobs[0].ID)
	page = listPage(t, dev, url.Values{"label": {"kind=bad"}, "reason": {"exit_nonzero"}, "q": {run}}, http.StatusOK)
	require.Len(t, page.Jobs, 1)
	assert.Equal(t, run+"-bad", page.Jobs[0].ID)

	// Paging: one per page, then the second, then the end.
	page = listPage(t, dev, url.Values{"q": {run}, "limit": {"1"}}, http.StatusOK)
	require.Len(t, page.Jobs, 1)
	require.NotEmpty(t, page.NextCursor)
	page = listPage(t, dev, url.Values{"q": {run}, "limit": {"1"}, "cursor": {page.NextCursor}}, http.StatusOK)
	require.Len(t, page.Jobs, 1)
	assert.Equal(t, run+"-ok", page.Jobs[0].ID)
	if page.NextCursor != "" {
		page = listPage(t, dev, url.Values{"q": {run}, "limit": {"1"}, "cursor": {page.NextCursor}}, http.StatusOK)
		assert.Empty(t, page.Jobs)
	}

	page = listPage(t, other, url.Values{"q": {run}}, http.StatusOK)
	require.Len(t, page.Jobs, 1)
	assert.Equal(t, run+"-theirs", page.Jobs[0].ID)

	e := apiErr(t, dev.call(http.MethodGet, "/v1/jobs?cursor=bogus", nil, http.StatusBadRequest))
	assert.Equal(t, codeInvalidRequest, e.Code)
	assert.Equal(t, []string{"cursor"}, errFields(e.Fields))
	// Invalid on purpose: the OpenAPI check would refuse to send these.
	raw := authed(devToken)
	for _, q := range []string{"state=sleeping", "limit=0", "limit=abc"} {
		resp, err := raw.Get(f.URL + "/v1/jobs?" + q)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
	}
}

// testAPIJobEvents: a job's row changes arrive as events, queued then
// running then succeeded, and another tenant's stream never shows it. Two
// blockers hold the worker's two slots, so the job stays queued until the
// test saw it queued; it then waits for a file, so it stays running until
// the test saw it running.
func testAPIJobEvents(t *testing.T, f *fleet) {
	dev := newAPIClient(t, f.URL, devToken)
	other := newAPIClient(t, f.URL, otherToken)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	otherStream := openStream(t, other, ctx, "/v1/events")
	devStream := openStream(t, dev, ctx, "/v1/events")

	run := "ev-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	gated := func(id, vol string) map[string]any {
		return map[string]any{"id": id, "command": "while [ ! -e /workspace/go ]; do sleep 0.1; done",
			"volume": map[string]any{"name": vol}, "heal": map[string]any{"mode": "off"}}
	}
	// release opens a gated job's gate: "running" is indexed when the run
	// begins, before the worker mounts the volume's filesystem over its
	// directory, and a file written then is hidden under the mount, so the
	// gate file is written every 200 ms until the test's job ended (a write
	// before the directory exists fails, and is tried again).
	var jobEnded atomic.Bool
	release := func(vol string) {
		gofile := filepath.Join(f.volumeDir("dev", vol), "go")
		go func() {
			for ctx.Err() == nil && !jobEnded.Load() {
				_ = os.WriteFile(gofile, nil, 0o644)
				time.Sleep(200 * time.Millisecond) // sleep: a retry interval, not a wait for an event
			}
		}()
	}
	dev.call(http.MethodPost, "/v1/jobs", gated(run+"-b1", run+"-b1"), http.StatusAccepted)
	dev.call(http.MethodPost, "/v1/jobs", gated(run+"-b2", run+"-b2"), http.StatusAccepted)
	running := map[string]bool{}
	sent := map[string]bool{} // job and updated_at of each event
	var states []job.State
	id := run + "-job"
	for {
		ev, ok := devStream.next()
		require.True(t, ok, "the stream ended; states so far %v", states)
		require.Equal(t, "job", ev.name)
		var s job.Summary
		require.NoError(t, json.Unmarshal([]byte(ev.data), &s))
		assert.Equal(t, "dev", s.Tenant)
		assert.Equal(t, strconv.FormatInt(s.UpdatedAt.UnixMicro(), 10), ev.id)
		assert.False(t, sent[s.ID+" "+ev.id], "the same change sent twice: %s", ev.data)
		sent[s.ID+" "+ev.id] = true
		switch {
		case s.ID != id && s.State == job.StateRunning && !running[s.ID]:
			running[s.ID] = true
			if running[run+"-b1"] && running[run+"-b2"] {
				// Both slots taken: the job can only wait in the queue.
				dev.call(http.MethodPost, "/v1/jobs", gated(id, run), http.StatusAccepted)
			}
		case s.ID != id:
		case len(states) == 0 || states[len(states)-1] != s.State:
			states = append(states, s.State)
			switch s.State {
			case job.StateQueued:
				release(run + "-b1")
				release(run + "-b2")
			case job.StateRunning:
				release(run)
			}
		}
		if s.ID == id && s.State.Terminal() {
			break
		}
	}
	jobEnded.Store(true)
	assert.Equal(t, []job.State{job.StateQueued, job.StateRunning, job.StateSucceeded}, states)

	// other's stream: its own job arrives, dev's never did.
	oid := run + "-other"
	submitWait(t, other, map[string]any{"id": oid, "command": "true", "heal": map[string]any{"mode": "off"}})
	for {
		ev, ok := otherStream.next()
		require.True(t, ok)
		var s job.Summary
		require.NoError(t, json.Unmarshal([]byte(ev.data), &s))
		require.Equal(t, "other", s.Tenant, "another tenant's job on other's stream: %s", ev.data)
		if s.ID == oid && s.State.Terminal() {
			break
		}
	}
}

// openStream opens an event stream at path.
func openStream(t *testing.T, a *apiClient, ctx context.Context, path string, header ...string) *sseStream {
	t.Helper()
	resp := a.do(ctx, http.MethodGet, path, nil, header...)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &sseStream{resp: resp, sc: sc}
}

// testAPITrace: a job's trace is the caller's tenant's spans only, and
// only for a job in its list.
func testAPITrace(t *testing.T, f *fleet) {
	dev := newAPIClient(t, f.URL, devToken)
	other := newAPIClient(t, f.URL, otherToken)
	id := "tr" + strconv.FormatInt(time.Now().UnixNano(), 36)
	submitWait(t, dev, map[string]any{"id": id, "command": "true", "heal": map[string]any{"mode": "off"}})

	var tr traceBody
	require.NoError(t, json.Unmarshal(dev.call(http.MethodGet, "/v1/jobs/"+id+"/trace", nil, http.StatusOK), &tr))
	require.Len(t, tr.Spans, 2, "dev's trace, not other's")
	assert.Equal(t, "paddock.submit", tr.Spans[0].Name, "sorted by start")
	assert.Equal(t, "paddock.attempt", tr.Spans[1].Name)
	assert.Equal(t, "s1", tr.Spans[1].ParentID)

	// other has no job of that id: its own trace of the id is not shown
	// either, and dev's never.
	e := apiErr(t, other.call(http.MethodGet, "/v1/jobs/"+id+"/trace", nil, http.StatusNotFound))
	assert.Equal(t, codeNotFound, e.Code)
	dev.call(http.MethodGet, "/v1/jobs/never-submitted/trace", nil, http.StatusNotFound)
}

// Without hooks, the trace and fleet endpoints say the gateway lacks them.
func TestAPIDashboardUnwired(t *testing.T) {
	g := bareGateway(t, nil)
	base := serveTest(t, g.Handler())
	dev := newAPIClient(t, base, devToken)
	e := apiErr(t, dev.call(http.MethodGet, "/v1/fleet", nil, http.StatusServiceUnavailable))
	assert.Equal(t, codeUnavailable, e.Code)
	e = apiErr(t, dev.call(http.MethodGet, "/v1/jobs/x/trace", nil, http.StatusServiceUnavailable))
	assert.Contains(t, e.Message, "spans")
}

func TestTenantSpans(t *testing.T) {
	spans, _ := fakeSpans(context.Background(), "j")
	got := tenantSpans(spans, "dev")
	require.Len(t, got, 2)
	for _, s := range got {
		assert.Equal(t, "t-dev", s.TraceID)
	}
	assert.Len(t, tenantSpans(spans, "other"), 1)
	assert.Empty(t, tenantSpans(spans, "third"))
}

// testAPIJobEventsCap: GET /v1/events counts against the token's stream
// cap, shared with the job streams, and gives its slot back when closed.
func testAPIJobEventsCap(t *testing.T, f *fleet) {
	cfg := f.gw.cfg
	cfg.MaxStreams = 1
	g, err := New(cfg)
	require.NoError(t, err)
	dev := newAPIClient(t, serveTest(t, g.Handler()), devToken)
	ctx, cancel := context.WithCancel(context.Background())
	s := openStream(t, dev, ctx, "/v1/events")
	for _, path := range []string{"/v1/events", "/v1/jobs/x/events"} {
		data := dev.call(http.MethodGet, path, nil, http.StatusTooManyRequests)
		assert.Equal(t, codeTooManyStreams, apiErr(t, data).Code)
	}
	cancel()
	s.resp.Body.Close()
	require.Eventually(t, func() bool { return streamsOf(g, "token:dev-id") == 0 }, time.Minute, 10*time.Millisecond,
		"a closed stream is released")
}

// When the tenant's NATS permissions refuse the list, GET /v1/jobs is 403
// and GET /v1/events says so in an error event and ends (retrying cannot
// help).
func TestAPIListRefused(t *testing.T) {
	perms := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{job.SubmitSubject("dev")}},
		Subscribe: &server.SubjectPermission{Allow: []string{job.InboxPrefix("dev") + ".>"}},
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "dev", Password: "pw", Permissions: perms}}})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	pool := NewPool(func(ctx context.Context, tenant string) (*nats.Conn, error) {
		return nats.Connect(srv.ClientURL(), nats.UserInfo("dev", "pw"), nats.CustomInboxPrefix(job.InboxPrefix(tenant)))
	}, client.Config{})
	t.Cleanup(pool.Close)
	g := bareGateway(t, func(c *Config) { c.Clients = pool })
	dev := newAPIClient(t, serveTest(t, g.Handler()), devToken)

	e := apiErr(t, dev.call(http.MethodGet, "/v1/jobs", nil, http.StatusForbidden))
	assert.Equal(t, codeForbidden, e.Code)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := openStream(t, dev, ctx, "/v1/events")
	ev, ok := s.next()
	require.True(t, ok, "an error event, not a stream polling until the deadline")
	require.Equal(t, "error", ev.name, ev.data)
	assert.Equal(t, codeForbidden, apiErr(t, []byte(ev.data)).Code)
	_, more := s.next()
	assert.False(t, more, "the stream ends after the error")
}
