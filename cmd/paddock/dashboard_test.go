package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/worker"
)

// The fleet view of tenant dev, read from a real Redis next to another
// tenant's activity: a worker's heartbeat (its id is a host name), a
// running asynq server (host, pid), the other tenant's jobs in a queue of
// its own name, ended oom. Dev sees its own jobs by queue and its own
// reasons; of the fleet only the anonymous workers and capacity: no host
// name, worker id, pid, other tenant's name, queue or count.
func TestAttackFleetViewShowsOnlyOwn(t *testing.T) {
	rs := testsvc.StartRedis(t)
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	host, err := os.Hostname()
	require.NoError(t, err)

	hb := worker.NewHeartbeat(rdb, "w-"+host, "paddock:", 30*time.Second)
	require.NoError(t, hb.Start(ctx))
	t.Cleanup(hb.Stop)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 3, Queues: map[string]int{"beta-private": 1}, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
	t.Cleanup(srv.Shutdown)
	ac := asynq.NewClientFromRedisClient(rdb)
	_, err = ac.Enqueue(asynq.NewTask(job.TaskType, nil), asynq.Queue("beta-idle"), asynq.TaskID("betacorp/beta-secret"))
	require.NoError(t, err)

	ns := testsvc.StartNATS(t)
	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	for _, tn := range []string{"dev", "betacorp"} {
		require.NoError(t, results.EnsureTenant(ctx, js, results.StreamConfig{}, tn, 0, 0))
	}
	st := results.NewStore(rdb, js, results.StoreConfig{})
	require.NoError(t, st.Queued(ctx, job.Spec{ID: "dev-job", Tenant: "dev", Command: "x", Queue: "default"}, time.Now()))
	for i := range 7 { // the other tenant's jobs, ended oom, in its own queue
		id := fmt.Sprintf("beta-secret-%d", i)
		require.NoError(t, st.Queued(ctx, job.Spec{ID: id, Tenant: "betacorp", Command: "x", Queue: "beta-private"}, time.Now()))
		_, _, err := st.Record(ctx, job.Result{V: 1, ID: id, Tenant: "betacorp", State: job.StateFailed, Reason: job.ReasonOOM,
			Queue: "beta-private", FinishedAt: time.Now()})
		require.NoError(t, err)
	}
	require.NoError(t, st.Queued(ctx, job.Spec{ID: "dev-done", Tenant: "dev", Command: "x", Queue: "default"}, time.Now()))
	_, _, err = st.Record(ctx, job.Result{V: 1, ID: "dev-done", Tenant: "dev", State: job.StateSucceeded, Reason: job.ReasonOK,
		Queue: "default", FinishedAt: time.Now()})
	require.NoError(t, err)
	fv := &fleetView{rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), store: st, prefix: "paddock:"}

	var body fleetBody
	require.Eventually(t, func() bool {
		body, err = fv.read(ctx, "dev")
		require.NoError(t, err)
		return body.Capacity.Slots == 3
	}, 30*time.Second, 50*time.Millisecond, "the asynq server registers")
	data, err := json.Marshal(body)
	require.NoError(t, err)
	text := string(data)
	t.Logf("dev's fleet view: %s", text)
	for _, secret := range []string{"betacorp", "beta-", "oom", host, "w-", strconv.Itoa(os.Getpid())} {
		assert.NotContains(t, text, secret, "dev's fleet view shows no other tenant, queue, count or host")
	}
	assert.Equal(t, "dev", body.Tenant)
	require.Len(t, body.Workers, 1)
	assert.True(t, body.Workers[0].Alive)
	assert.Equal(t, fleetCapacity{WorkersAlive: 1, Slots: 3}, body.Capacity)
	assert.Equal(t, []fleetQueue{{Name: "default", Queued: 1, EndedLastHour: 1}}, body.Queues)
	require.Len(t, body.Reasons, 1)
	assert.Equal(t, map[string]int{"ok": 1}, body.Reasons[0].Counts, "only dev's own reasons")
	assert.False(t, body.Partial)

	// betacorp sees its own, not dev's.
	beta, err := fv.read(ctx, "betacorp")
	require.NoError(t, err)
	data, _ = json.Marshal(beta)
	assert.NotContains(t, string(data), "dev")
	assert.Equal(t, []fleetQueue{{Name: "beta-private", EndedLastHour: 7, FailedLastHr: 7}}, beta.Queues)

	hb.Stop()
	body, err = fv.read(ctx, "dev")
	require.NoError(t, err)
	require.Len(t, body.Workers, 1)
	assert.False(t, body.Workers[0].Alive, "a stopped worker is known but not alive")
	assert.Zero(t, body.Capacity.WorkersAlive)
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

func spanLine(trace, span, parent, name, jobID, tenant string, at time.Time) string {
	return fmt.Sprintf(`{"trace_id":%q,"span_id":%q,"parent_span_id":%q,"name":%q,"kind":"internal","start":%q,"end":%q,`+
		`"duration_ms":1000,"status":"ok","attributes":{"paddock.job.id":%q,"paddock.tenant":%q},"service":"paddock"}`+"\n",
		trace, span, parent, name, at.Format(time.RFC3339Nano), at.Add(time.Second).Format(time.RFC3339Nano), jobID, tenant)
}

func TestReadSpans(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spans.jsonl")
	ctx := context.Background()
	spans, err := readSpans(ctx, path, "j1")
	require.NoError(t, err, "no span file yet: no spans")
	assert.Empty(t, spans)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	text := spanLine("aa", "s1", "p0", "paddock.submit", "j1", "dev", at) +
		spanLine("bb", "x1", "", "paddock.submit", "j2", "dev", at) +
		// a span of j1's trace without the job's id: still j1's
		strings.Replace(spanLine("aa", "s2", "s1", "paddock.sandbox", "", "dev", at.Add(time.Second)), `"paddock.job.id":"",`, "", 1) +
		`{"trace_id":"aa","torn` + "\n"
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	spans, err = readSpans(ctx, path, "j1")
	require.NoError(t, err)
	require.Len(t, spans, 2)
	assert.Equal(t, "aa", spans[0].TraceID)
	assert.Equal(t, "p0", spans[0].ParentID)
	assert.Equal(t, "paddock.submit", spans[0].Name)
	assert.Equal(t, "dev", spans[0].Attrs["paddock.tenant"])
	assert.Equal(t, time.Second, spans[0].End.Sub(spans[0].Start))
	assert.Equal(t, "paddock.sandbox", spans[1].Name)
}

// A trace request on a span file far larger than its bound reads the
// file's last maxSpanScan bytes, once, and still finds a recent job's
// trace; an old job's spans, past the bound, are not read at all.
func TestAttackTraceOnLargeSpanFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := bufio.NewWriterSize(f, 1<<20)
	_, err = w.WriteString(spanLine("old", "o1", "", "paddock.submit", "old-job", "dev", at))
	require.NoError(t, err)
	filler := 0
	for size := int64(0); size < 4*maxSpanScan; filler++ {
		n, err := w.WriteString(spanLine(fmt.Sprintf("t%031d", filler), "f1", "", "paddock.attempt", fmt.Sprintf("other-%d", filler), "other", at))
		require.NoError(t, err)
		size += int64(n)
	}
	_, err = w.WriteString(spanLine("new", "n1", "", "paddock.submit", "new-job", "dev", at) + spanLine("new", "n2", "n1", "paddock.attempt", "new-job", "dev", at))
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	st, err := f.Stat()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	t.Logf("span file: %d MiB, %d spans", st.Size()>>20, filler+3)

	rf, err := os.Open(path)
	require.NoError(t, err)
	defer rf.Close()
	c := &countingReaderAt{r: rf}
	spans, err := readSpanTail(context.Background(), c, st.Size(), "new-job", maxSpanScan)
	require.NoError(t, err)
	require.Len(t, spans, 2)
	assert.Equal(t, "n1", spans[0].SpanID)
	assert.LessOrEqual(t, c.n.Load(), int64(maxSpanScan), "one bounded read")

	c.n.Store(0)
	spans, err = readSpanTail(context.Background(), c, st.Size(), "old-job", maxSpanScan)
	require.NoError(t, err)
	assert.Empty(t, spans, "spans older than the bound are not found")
	assert.LessOrEqual(t, c.n.Load(), int64(maxSpanScan))
}

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
	var fleet fleetBody
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
