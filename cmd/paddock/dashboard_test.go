package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/worker"
)

// The fleet view reads a real Redis: a worker's heartbeat, a running asynq
// server, a queue with a pending task and the index's reason counts. It
// names no job.
func TestFleetView(t *testing.T) {
	rs := testsvc.StartRedis(t)
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()

	hb := worker.NewHeartbeat(rdb, "w-test", "paddock:", 30*time.Second)
	require.NoError(t, hb.Start(ctx))
	t.Cleanup(hb.Stop)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 3, Queues: map[string]int{"busy": 1}, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })))
	t.Cleanup(srv.Shutdown)
	ac := asynq.NewClientFromRedisClient(rdb)
	_, err := ac.Enqueue(asynq.NewTask(job.TaskType, nil), asynq.Queue("idle"), asynq.TaskID("dev/secret-job"))
	require.NoError(t, err)

	st := results.NewStore(rdb, nil, results.StoreConfig{})
	require.NoError(t, st.Queued(ctx, job.Spec{ID: "secret-job", Tenant: "dev", Command: "x"}, time.Now()))
	fv := &fleetView{rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), store: st, prefix: "paddock:"}

	var body fleetBody
	require.Eventually(t, func() bool {
		body, err = fv.read(ctx)
		require.NoError(t, err)
		return len(body.Servers) == 1
	}, 30*time.Second, 50*time.Millisecond, "the asynq server registers")
	require.Len(t, body.Workers, 1)
	assert.Equal(t, "w-test", body.Workers[0].ID)
	assert.True(t, body.Workers[0].Alive)
	assert.Less(t, body.Workers[0].HeartbeatAgeMS, int64(30_000))
	assert.Equal(t, 3, body.Servers[0].Concurrency)
	var idle *fleetQueue
	for i := range body.Queues {
		if body.Queues[i].Name == "idle" {
			idle = &body.Queues[i]
		}
	}
	require.NotNil(t, idle, "%+v", body.Queues)
	assert.Equal(t, 1, idle.Pending)
	assert.NotNil(t, body.Reasons)

	hb.Stop()
	body, err = fv.read(ctx)
	require.NoError(t, err)
	require.Len(t, body.Workers, 1)
	assert.False(t, body.Workers[0].Alive, "a stopped worker is known but not alive")
}

func TestReadSpans(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spans.jsonl")
	spans, err := readSpans(path, "j1")
	require.NoError(t, err, "no span file yet: no spans")
	assert.Empty(t, spans)
	line := `{"trace_id":"aa","span_id":"s1","parent_span_id":"p0","name":"paddock.submit","kind":"producer",` +
		`"start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:00:01Z","duration_ms":1000,"status":"ok",` +
		`"attributes":{"paddock.job.id":"j1","paddock.tenant":"dev"},"service":"paddock"}` + "\n"
	require.NoError(t, os.WriteFile(path, []byte(line), 0o600))
	spans, err = readSpans(path, "j1")
	require.NoError(t, err)
	require.Len(t, spans, 1)
	assert.Equal(t, "aa", spans[0].TraceID)
	assert.Equal(t, "p0", spans[0].ParentID)
	assert.Equal(t, "paddock.submit", spans[0].Name)
	assert.Equal(t, "dev", spans[0].Attrs["paddock.tenant"])
	assert.Equal(t, time.Second, spans[0].End.Sub(spans[0].Start))
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
	assert.NotEmpty(t, fleet.Servers)
	assert.NotEmpty(t, fleet.Reasons, "the ok just recorded")
	assert.NotContains(t, string(data), "dash-1", "the fleet view names no job")
}
