package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

// mcpFleet is a fleet whose cleanup first waits for the gateway's MCP
// session watchers (they end workspaces after their sessions closed).
func mcpFleet(t *testing.T, mod func(*Config)) *fleet {
	t.Helper()
	f := newFleet(t, mod)
	t.Cleanup(f.gw.sess.watchers.Wait) // after the sessions' Close (LIFO)
	return f
}

// connect opens an MCP session with the SDK's own client over streamable
// HTTP, as the holder of token; the session is closed at cleanup.
func (f *fleet) connect(token string) *mcp.ClientSession {
	f.t.Helper()
	return f.connectAt(f.URL+"/mcp", token)
}

// connectAt opens an MCP session at endpoint.
func (f *fleet) connectAt(endpoint, token string) *mcp.ClientSession {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "paddock-test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: authed(token)}, nil)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls bash with args and returns the one text of its answer.
func call(t *testing.T, cs *mcp.ClientSession, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: args})
	require.NoError(t, err, "a tool call never fails as a protocol error")
	require.Len(t, res.Content, 1, "exactly one content")
	tc, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "a text content: %T", res.Content[0])
	return tc.Text, res.IsError
}

// run calls bash with command and requires a plain answer.
func run(t *testing.T, cs *mcp.ClientSession, command string) string {
	t.Helper()
	text, isErr := call(t, cs, map[string]any{"command": command})
	require.False(t, isErr, text)
	return text
}

// body is an answer without its status line.
func body(text string) string {
	_, b, _ := strings.Cut(text, "\n")
	return b
}

func volumeOf(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	vol, err := SessionVolume(SessionMCP, cs.ID())
	require.NoError(t, err)
	return vol
}

// The server offers exactly one tool, bash, with its short description and
// schema.
func TestMCPListTools(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	cs := f.connect(devToken)
	res, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, res.Tools, 1)
	tool := res.Tools[0]
	assert.Equal(t, "bash", tool.Name)
	assert.Equal(t, bashDescription, tool.Description)
	schema, err := json.Marshal(tool.InputSchema)
	require.NoError(t, err)
	assert.JSONEq(t, string(bashSchema), string(schema))
	whole, err := json.Marshal(tool)
	require.NoError(t, err)
	t.Logf("tools/list entry: %d bytes (description %d, schema %d)", len(whole), len(tool.Description), len(schema))
	init := cs.InitializeResult()
	assert.Equal(t, "paddock", init.ServerInfo.Name)
}

// spillRe finds the spill path of a cut stdout in an answer.
var spillRe = regexp.MustCompile(`bytes cut; full stdout: (/workspace/\.paddock/out/\S+\.stdout) — page it`)

// One session is one workspace: a file written by one call is there for
// the next, a huge output is capped with the path of its whole, and the
// next call pages it.
func TestMCPSession(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	cs := f.connect(devToken)

	got := run(t, cs, `printf 'echo "sum $((2+3))"\n' > /workspace/run.sh && echo written`)
	assert.Regexp(t, `^exit 0 · ok · \d+\.\d\d s · job \S+\nwritten\n$`, got)
	assert.Equal(t, "sum 5\n", body(run(t, cs, "bash /workspace/run.sh")))
	assert.FileExists(t, f.volumeDir("dev", volumeOf(t, cs))+"/run.sh", "the workspace is the session's volume")

	got = run(t, cs, "seq 200000")
	t.Logf("seq 200000 (1,288,895 bytes): a %d-character answer; its status and marker:\n%s\n%s", utf8.RuneCountInString(got),
		strings.SplitN(got, "\n", 2)[0], regexp.MustCompile(`\[….*\]`).FindString(got))
	assert.LessOrEqual(t, utf8.RuneCountInString(got), 10_000)
	assert.Contains(t, got, "\n1\n2\n3\n")
	assert.True(t, strings.HasSuffix(got, "\n199999\n200000\n"), "the tail is kept")
	m := spillRe.FindStringSubmatch(got)
	require.NotNil(t, m, "the answer names the spill file: %s", got)
	assert.Equal(t, "100000\n100001\n100002\n", body(run(t, cs, "sed -n '100000,100002p' "+m[1])))
	assert.Equal(t, "200000\n", body(run(t, cs, "wc -l < "+m[1])))
}

// Two sessions have two workspaces: neither sees the other's files.
func TestMCPSessionsIsolated(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	a, b := f.connect(devToken), f.connect(devToken)
	require.NotEqual(t, a.ID(), b.ID())
	run(t, a, "echo secret > /workspace/a.txt")
	text, isErr := call(t, b, map[string]any{"command": "cat /workspace/a.txt"})
	assert.False(t, isErr, "a failing command is an answer, not an error")
	assert.Regexp(t, `^exit 1 · exit_nonzero`, text)
	assert.NotContains(t, text, "secret")
	assert.Equal(t, "secret\n", body(run(t, a, "cat /workspace/a.txt")))
	assert.NotEqual(t, volumeOf(t, a), volumeOf(t, b))
	// Another tenant's session is in another tenant's volumes.
	o := f.connect(otherToken)
	run(t, o, "echo other > /workspace/o.txt")
	assert.FileExists(t, f.volumeDir("other", volumeOf(t, o))+"/o.txt")
}

// /mcp?session=NAME: MCP sessions that reconnect share the tenant's named
// workspace (the HTTP API's "session" of that name), another tenant's of
// the same name is its own, and closing an MCP session keeps it.
func TestMCPNamedSession(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	a := f.connectAt(f.URL+"/mcp?session=work", devToken)
	run(t, a, "echo kept > /workspace/n.txt")
	require.NoError(t, a.Close())
	b := f.connectAt(f.URL+"/mcp?session=work", devToken)
	assert.Equal(t, "kept\n", body(run(t, b, "cat /workspace/n.txt")))
	vol, err := SessionVolume(SessionHTTP, "work")
	require.NoError(t, err)
	assert.FileExists(t, f.volumeDir("dev", vol)+"/n.txt")
	o := f.connectAt(f.URL+"/mcp?session=work", otherToken)
	text, _ := call(t, o, map[string]any{"command": "cat /workspace/n.txt"})
	assert.NotContains(t, text, "kept")
	plain := f.connect(devToken)
	text, _ = call(t, plain, map[string]any{"command": "cat /workspace/n.txt"})
	assert.NotContains(t, text, "kept", "without ?session= the MCP session has its own workspace")

	req, err := http.NewRequest(http.MethodPost, f.URL+"/mcp?session=Bad%20Name", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+devToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// A session id is bound to its tenant: another tenant's token cannot use
// it (403), a missing or unknown token gets 401.
func TestMCPSessionBoundToTenant(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	cs := f.connect(devToken)
	list := func(token string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, f.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":99,"method":"tools/list"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	code, text := list(devToken)
	assert.Equal(t, http.StatusOK, code, text)
	assert.Contains(t, text, `"bash"`)
	code, text = list(otherToken)
	assert.Equal(t, http.StatusForbidden, code, "another tenant's token on dev's session: %s", text)
	assert.NotContains(t, text, `"bash"`)
	code, _ = list("")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = list("forged-token")
	assert.Equal(t, http.StatusUnauthorized, code)
	// The session still works for its owner.
	run(t, cs, "true")
}

// Closing an MCP session ends its workspace: its files are deleted, its
// record removed.
func TestMCPCloseDeletesWorkspace(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	cs := f.connect(devToken)
	run(t, cs, "mkdir -p /workspace/d && echo x > /workspace/d/f")
	file := f.volumeDir("dev", volumeOf(t, cs)) + "/d/f"
	require.FileExists(t, file)
	ref := SessionRef{Tenant: "dev", Kind: SessionMCP, Name: cs.ID()}
	_, err := f.gw.cfg.Sessions.Get(context.Background(), ref)
	require.NoError(t, err, "the session has a record")

	require.NoError(t, cs.Close())
	f.gw.sess.watchers.Wait()
	assert.NoFileExists(t, file)
	_, err = f.gw.cfg.Sessions.Get(context.Background(), ref)
	assert.ErrorIs(t, err, ErrNoSession)
}

// An MCP session idle for SessionIdleTTL is closed by the SDK, which ends
// its workspace. (The TTL's floor is a minute in Config; the handler here
// is built after lowering it.)
func TestMCPIdleSessionEnds(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	f.gw.cfg.SessionIdleTTL = time.Second // before any request reads it
	srv := httptest.NewServer(f.gw.mcpHTTP())
	t.Cleanup(srv.Close)
	cs := f.connectAt(srv.URL+"/mcp", devToken)
	run(t, cs, "echo x > /workspace/f")
	file := f.volumeDir("dev", volumeOf(t, cs)) + "/f"
	require.FileExists(t, file)
	ref := SessionRef{Tenant: "dev", Kind: SessionMCP, Name: cs.ID()}
	require.Eventually(t, func() bool {
		_, err := f.gw.cfg.Sessions.Get(context.Background(), ref)
		return errors.Is(err, ErrNoSession)
	}, time.Minute, 50*time.Millisecond, "the idle session's record is removed")
	assert.NoFileExists(t, file)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}})
	assert.Error(t, err, "the SDK closed the session")
}

// An idle MCP session is closed by the SDK after SessionIdleTTL, which
// ends its workspace too; here the test closes it as the timer would.
func TestMCPCloseSessions(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	a, b := f.connect(devToken), f.connect(otherToken)
	run(t, a, "echo a > /workspace/f")
	run(t, b, "echo b > /workspace/f")
	files := []string{f.volumeDir("dev", volumeOf(t, a)) + "/f", f.volumeDir("other", volumeOf(t, b)) + "/f"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, f.gw.CloseSessions(ctx))
	for _, file := range files {
		assert.NoFileExists(t, file)
	}
	_, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}})
	assert.Error(t, err, "the session is gone")
}

// Failures are tool errors (IsError, a text saying why), never protocol
// errors: a schema violation, a job the fleet rejects, a timeout.
func TestMCPToolErrors(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	cs := f.connect(devToken)
	text, isErr := call(t, cs, map[string]any{"command": "true", "timeout_s": 100000})
	assert.True(t, isErr)
	assert.Contains(t, text, "timeout_s")

	text, isErr = call(t, cs, map[string]any{"command": "true", "image": "nope:latest"})
	assert.True(t, isErr)
	assert.Regexp(t, `^rejected · job \S+\n`, text)
	assert.Contains(t, text, `image: "nope:latest" is not allowed`)

	// 5 s, not 1: the job timeout counts the box's start too, and on a
	// loaded host 1 s has passed before the echo ran.
	text, isErr = call(t, cs, map[string]any{"command": "echo started; sleep 30", "timeout_s": 5})
	assert.True(t, isErr)
	assert.Regexp(t, `^exit -?\d+ · timeout · `, text)
	assert.Contains(t, text, "killed at the timeout (5s)")
	assert.Contains(t, text, "\nstarted\n")

	text, isErr = call(t, cs, map[string]any{"command": "echo out; echo err >&2; exit 3"})
	assert.False(t, isErr, "a command's own failure is an answer")
	assert.Regexp(t, `^exit 3 · exit_nonzero · .*\nout\n--- stderr ---\nerr\n$`, text)

	text, isErr = call(t, cs, map[string]any{"command": "   "})
	assert.True(t, isErr)
	assert.Contains(t, text, "command")
}

// A call whose client gives up cancels its job.
func TestMCPCallCanceled(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	cs := f.connect(devToken)
	results, err := f.nc.SubscribeSync(job.ResultSubjects("dev"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = results.Unsubscribe() })
	require.NoError(t, f.nc.Flush())
	stream, err := f.js.Stream(context.Background(), job.JobsStream("dev"))
	require.NoError(t, err)
	info, err := stream.Info(context.Background())
	require.NoError(t, err)
	before := info.State.Msgs

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep 120"}})
		done <- err
	}()
	require.Eventually(t, func() bool {
		info, err := stream.Info(context.Background())
		return err == nil && info.State.Msgs > before
	}, time.Minute, 20*time.Millisecond, "the job is submitted")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	deadline := time.Now().Add(time.Minute)
	for {
		m, err := results.NextMsg(time.Until(deadline))
		require.NoError(t, err, "a result for the canceled call's job")
		var r job.Result
		require.NoError(t, json.Unmarshal(m.Data, &r))
		if r.Labels[LabelSession] == cs.ID() {
			assert.Equal(t, job.ReasonCanceled, r.Reason, r.Error)
			break
		}
	}
	assert.True(t, errors.Is(ctx.Err(), context.Canceled))
	run(t, cs, "true") // the session goes on
}

// `paddock mcp` (stdio): the process is one session, whose workspace is
// deleted when the client goes away. The transport here is in memory.
func TestServeMCPStdio(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	ct, st := mcp.NewInMemoryTransports()
	served := make(chan error, 1)
	go func() { served <- f.gw.serveMCP(context.Background(), Identity{Tenant: "dev", TokenID: "local"}, st) }()
	c := mcp.NewClient(&mcp.Implementation{Name: "paddock-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	run(t, cs, "echo local > /workspace/f")
	assert.Equal(t, "local\n", body(run(t, cs, "cat /workspace/f")))
	idle, err := f.gw.cfg.Sessions.Idle(context.Background(), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Len(t, idle, 1)
	file := f.volumeDir("dev", idle[0].Volume) + "/f"
	require.FileExists(t, file)

	require.NoError(t, cs.Close())
	require.NoError(t, <-served)
	assert.NoFileExists(t, file)
	idle, err = f.gw.cfg.Sessions.Idle(context.Background(), time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Empty(t, idle)
}

// Requests that are not tool calls (a ping) keep an MCP session's
// workspace: the SDK keeps the session for them, so the sweeper must not
// end it as idle.
func TestMCPPingKeepsWorkspace(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	cs := f.connect(devToken)
	run(t, cs, "echo x > /workspace/f")
	ref := SessionRef{Tenant: "dev", Kind: SessionMCP, Name: cs.ID()}
	before, err := f.gw.cfg.Sessions.Get(context.Background(), ref)
	require.NoError(t, err)
	f.gw.sess.skew.Store(int64(20 * time.Minute))
	require.NoError(t, cs.Ping(context.Background(), nil))
	require.Eventually(t, func() bool {
		s, err := f.gw.cfg.Sessions.Get(context.Background(), ref)
		return err == nil && s.LastUsed.After(before.LastUsed.Add(10*time.Minute))
	}, 10*time.Second, 20*time.Millisecond, "the ping refreshed the session's last use")
	f.gw.sess.skew.Store(int64(40 * time.Minute)) // 40 min after the call, 20 after the ping
	f.gw.sweep(context.Background())
	_, err = f.gw.cfg.Sessions.Get(context.Background(), ref)
	assert.NoError(t, err, "the sweeper kept the live session")
	assert.Equal(t, "x\n", body(run(t, cs, "cat /workspace/f")))
}
