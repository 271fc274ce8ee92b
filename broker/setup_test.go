package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/paddockhq/paddock/broker"
)

// canary is the secret of the tests' main grant: it must never reach the
// box, a record, a log line, a span or a metric. Its '/', '+', '<' and '&'
// make its JSON and URL escapings differ from it.
const canary = "cAnArY-7f3a9c2e/1b+Qw<k>&v9-zz"

// testPolicy is the policy of most tests; UPSTREAM is replaced by the
// upstream's URL.
const testPolicy = `{
  "version": 1,
  "grants": [
    {"name": "svc", "url": "UPSTREAM/api", "methods": ["GET", "POST", "HEAD"],
     "headers": {"Authorization": "Bearer ${secret:svc-token}", "X-Api-Version": "2"},
     "pass_headers": ["X-Request-Id"],
     "max_request_bytes": 64, "max_response_bytes": 4096, "timeout": "5s",
     "rate": {"per_second": 1000, "burst": 1000}},
    {"name": "narrow", "url": "UPSTREAM/api", "paths": ["/repos/paddock", "/users/*/keys"],
     "headers": {"Authorization": "Bearer ${secret:svc-token}"}},
    {"name": "limited", "url": "UPSTREAM/api", "rate": {"per_second": 0.001, "burst": 2},
     "headers": {"Authorization": "Bearer ${secret:svc-token}"}},
    {"name": "quick", "url": "UPSTREAM/api", "timeout": "20ms",
     "headers": {"Authorization": "Bearer ${secret:svc-token}"}},
    {"name": "tok", "url": "UPSTREAM/api", "token": {"audience": "inventory", "ttl": "10m"},
     "headers": {"Authorization": "Bearer ${token}"}},
    {"name": "other", "url": "UPSTREAM/api", "headers": {"Authorization": "Bearer ${secret:other-token}"}},
    {"name": "beta-only", "url": "UPSTREAM/api", "headers": {"Authorization": "Bearer ${secret:beta-token}"}}
  ],
  "tenants": {
    "acme": ["svc", "narrow", "limited", "quick", "tok", "other"],
    "beta": ["beta-only", "limited", "svc"]
  }
}`

// acmeGrants are the grants the tests' acme job asks for: all of acme's
// but "other", plus "beta-only", which acme lacks.
var acmeGrants = []string{"svc", "narrow", "limited", "quick", "tok", "beta-only"}

// seenReq is a request the upstream received.
type seenReq struct {
	Method, URI, Host string
	Header            http.Header
	Body              []byte
}

// upstream is the "real system": a TLS server on loopback that records what
// it receives and answers by path (route).
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []seenReq
	// got receives every request's URI (buffered), for tests that wait.
	got chan string
}

func newUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{got: make(chan string, 100)}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake errors of TestTLSVerified
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, seenReq{Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header.Clone(), Body: body})
	u.mu.Unlock()
	select {
	case u.got <- r.RequestURI:
	default: // nobody waits (a benchmark)
	}
	route(w, r)
}

// route answers the upstream's paths.
func route(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	if leak, ok := leakRoutes[strings.TrimPrefix(r.URL.Path, "/api")]; ok {
		leak(w, r, auth)
		return
	}
	switch strings.TrimPrefix(r.URL.Path, "/api") {
	case "/echo": // an upstream that gives the credential back, every way it can
		w.Header().Set("X-Echo", auth)
		w.Header().Set("Set-Cookie", "session="+auth)
		w.Header().Set("WWW-Authenticate", `Bearer realm="x"`)
		w.Header().Set("X-Safe", "kept")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "raw=%s\n", auth)
		_ = json.NewEncoder(w).Encode(map[string]string{"auth": auth})
		fmt.Fprintf(w, "query=%s\npath=%s\n", url.QueryEscape(auth), url.PathEscape(auth))
	case "/big": // declared too big
		w.Header().Set("Content-Length", "5000")
		_, _ = w.Write(bytes.Repeat([]byte("x"), 5000))
	case "/chunked":
		for range 50 {
			_, _ = w.Write(bytes.Repeat([]byte("y"), 100))
			w.(http.Flusher).Flush()
		}
	case "/br":
		w.Header().Set("Content-Encoding", "br")
		_, _ = w.Write([]byte("not really brotli"))
	case "/redirect":
		http.Redirect(w, r, "https://elsewhere.example/steal", http.StatusFound)
	case "/inside":
		http.Redirect(w, r, "/api/items?page=3", http.StatusFound)
	case "/sleep":
		<-r.Context().Done()
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}
}

func (u *upstream) seen() []seenReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenReq(nil), u.reqs...)
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// setup is a broker with its upstream, secret directory and telemetry.
type setup struct {
	t       testing.TB
	up      *upstream
	dir     string // the secret directory
	secrets *broker.DirSecrets
	b       *broker.Broker
	logs    *syncBuffer
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
}

// option changes a setup's broker config before New.
type option func(*broker.Config)

func newSetup(t testing.TB, opts ...option) *setup {
	t.Helper()
	s := &setup{t: t, up: newUpstream(t), dir: t.TempDir(), logs: &syncBuffer{},
		spans: tracetest.NewSpanRecorder(), metrics: sdkmetric.NewManualReader()}
	for name, v := range map[string]string{"svc-token": canary, "other-token": "other-secret-value", "beta-token": "beta-secret-value"} {
		writeSecret(t, s.dir, name, v+"\n")
	}
	var err error
	s.secrets, err = broker.NewDirSecrets(context.Background(), s.dir)
	require.NoError(t, err)
	pol, err := broker.ParsePolicy([]byte(strings.ReplaceAll(testPolicy, "UPSTREAM", s.up.srv.URL)))
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.metrics))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	cfg := broker.Config{
		HTTPClient: s.up.srv.Client(), // trusts the test server's CA
		Logger:     slog.New(slog.NewJSONHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Tracer:     tp.Tracer("broker-test"),
		Meter:      mp.Meter("broker-test"),
	}
	for _, o := range opts {
		o(&cfg)
	}
	s.b, err = broker.New(pol, s.secrets, cfg)
	require.NoError(t, err)
	require.NoError(t, s.b.CheckSecrets(context.Background()))
	return s
}

func writeSecret(t testing.TB, dir, name, value string) {
	t.Helper()
	p := filepath.Join(dir, name)
	tmp := filepath.Join(dir, "."+name+".tmp") // skipped by DirSecrets, like an editor's temporary file
	require.NoError(t, os.WriteFile(tmp, []byte(value), 0o600))
	require.NoError(t, os.Rename(tmp, p))
}

// box is one job served on its own unix socket, as the worker serves a box.
type box struct {
	t      testing.TB
	sock   string
	calls  *broker.CallLog
	cancel context.CancelFunc
	done   chan error
	client *http.Client
}

// serve starts Serve for j on a unix socket in a temporary directory.
func (s *setup) serve(j broker.JobInfo) *box {
	t := s.t
	t.Helper()
	sock := filepath.Join(t.TempDir(), "broker.sock")
	require.Less(t, len(sock), 104, "unix socket path too long: shorten the test's name")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	if j.Calls == nil {
		j.Calls = &broker.CallLog{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	bx := &box{t: t, sock: sock, calls: j.Calls, cancel: cancel, done: make(chan error, 1)}
	go func() { bx.done <- s.b.Serve(ctx, ln, j) }()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	bx.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		bx.stop()
	})
	return bx
}

// acmeJob is the tests' usual job.
func acmeJob() broker.JobInfo {
	return broker.JobInfo{Tenant: "acme", ID: "job-1", Grants: acmeGrants, Deadline: time.Now().Add(time.Hour)}
}

// stop ends the job and waits for Serve to return.
func (bx *box) stop() {
	bx.cancel()
	select {
	case err := <-bx.done:
		require.NoError(bx.t, err)
		bx.done <- nil // later stops return at once
	case <-time.After(10 * time.Second):
		bx.t.Fatal("Serve did not return after its context ended")
	}
}

// answer is a response as the box read it.
type answer struct {
	Status int
	Header http.Header
	Body   string
}

// do sends a request from the box; url names the grant as its host.
func (bx *box) do(method, rawURL string, body string, hdr ...string) answer {
	bx.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, rawURL, rd)
	require.NoError(bx.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := bx.client.Do(req)
	require.NoError(bx.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(bx.t, err)
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// raw writes request text (CRLF line ends added) on a new connection and
// reads one response: for request-targets no HTTP client would send.
func (bx *box) raw(request string) answer {
	bx.t.Helper()
	conn, err := net.Dial("unix", bx.sock)
	require.NoError(bx.t, err)
	defer conn.Close()
	text := strings.ReplaceAll(request, "\n", "\r\n")
	_, err = io.WriteString(conn, text)
	require.NoError(bx.t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(bx.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}
