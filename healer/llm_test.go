package healer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/internal/testsvc"
)

// fakeLLM is an OpenAI-compatible chat-completions server: the one fake
// of the suite (no model runs here). reply answers the n-th call (from 1).
type fakeLLM struct {
	srv   *httptest.Server
	reply func(n int, req llmRequest) (status int, body string)

	mu   sync.Mutex
	reqs []llmRequest
}

type llmRequest struct {
	Path, Auth string
	Body       struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens   *int     `json:"max_tokens"`
		Temperature *float64 `json:"temperature"`
	}
}

func newFakeLLM(t *testing.T, reply func(n int, req llmRequest) (int, string)) *fakeLLM {
	t.Helper()
	f := &fakeLLM{reply: reply}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		req := llmRequest{Path: r.URL.Path, Auth: r.Header.Get("Authorization")}
		if err := json.Unmarshal(raw, &req.Body); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		n := len(f.reqs)
		f.mu.Unlock()
		status, body := f.reply(n, req)
		if status == 0 { // hang until the client gives up
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

func (f *fakeLLM) request(i int) llmRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[i]
}

func (f *fakeLLM) config() *healer.LLMConfig {
	return &healer.LLMConfig{URL: f.srv.URL + "/v1", Model: "test-model", APIKey: "sk-test-secret", HTTPClient: f.srv.Client()}
}

// chat is a chat-completions response body.
func chat(content string, prompt, completion int) string {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "model": "test-model-2025",
		"choices": []map[string]any{{"index": 0, "finish_reason": "stop",
			"message": map[string]string{"role": "assistant", "content": content}}},
		"usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
	return string(b)
}

// fenced wraps a command the way models answer.
func fenced(cmd string) string { return "```sh\n" + cmd + "\n```" }

func TestParseReply(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, reply, want string
		err               error
	}{
		{"fenced", "```sh\ngrep -E 'x' f\n```", "grep -E 'x' f", nil},
		{"fenced with prose around", "Here you go:\n```bash\npython3 x.py\n```\nThis uses python3.", "python3 x.py", nil},
		{"fenced multi-line", "```\ncd /tmp\nls\n```", "cd /tmp\nls", nil},
		{"tilde fence", "~~~\nls -l\n~~~", "ls -l", nil},
		{"one-line fence", "```ls -la```", "ls -la", nil},
		{"bare single line", "  python3 x.py  ", "python3 x.py", nil},
		{"inline code", "`ls -l`", "ls -l", nil},
		{"prompt sign", "$ ls -l", "ls -l", nil},
		{"no fix", "PADDOCK_NO_FIX", "", healer.ErrNoFix},
		{"no fix fenced", "```\nPADDOCK_NO_FIX\n```", "", healer.ErrNoFix},
		{"empty", "   \n ", "", healer.ErrBadReply},
		{"empty block", "```sh\n```", "", healer.ErrBadReply},
		{"two blocks", "```\nls\n```\nor\n```\nls -a\n```", "", healer.ErrBadReply},
		{"unclosed block", "```sh\nls -l\n", "", healer.ErrBadReply},
		{"prose lines", "You should run\nls -l\ninstead", "", healer.ErrBadReply},
		{"NUL byte", "ls\x00 -l", "", healer.ErrBadReply},
		{"invalid UTF-8", "ls \xff", "", healer.ErrBadReply},
		{"too long", fenced("echo " + strings.Repeat("a", healer.MaxCommandBytes)), "", healer.ErrBadReply},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := healer.ParseReply(tc.reply)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				if tc.err == healer.ErrBadReply {
					var re *healer.ReplyError
					assert.ErrorAs(t, err, &re)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestLLMConfigValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []healer.LLMConfig{
		{URL: "", Model: "m"},
		{URL: "ftp://x/v1", Model: "m"},
		{URL: "http:///v1", Model: "m"},
		{URL: "http://x/v1"},
		{URL: "http://x/v1", Model: "m", MaxTokensPerJob: -1},
	} {
		_, err := healer.New(healer.Config{LLM: &c})
		assert.ErrorIs(t, err, healer.ErrConfig, "%+v", c)
	}
	_, err := healer.New(healer.Config{LLM: &healer.LLMConfig{URL: "https://api.example.com/v1/", Model: "m"}})
	assert.NoError(t, err)
}

func TestLLMErrorMessages(t *testing.T) {
	t.Parallel()
	e := &healer.LLMError{StatusCode: 503, Body: "overloaded"}
	assert.Equal(t, "healer: llm endpoint: status 503: overloaded", e.Error())
	assert.True(t, e.Retryable())
	assert.False(t, (&healer.LLMError{StatusCode: 401}).Retryable())
	assert.True(t, (&healer.LLMError{Err: fmt.Errorf("dial")}).Retryable())
}

// hostLog wraps a real transport and records the host of every request
// it is asked to send.
type hostLog struct {
	next  http.RoundTripper
	mu    sync.Mutex
	hosts []string
}

func (h *hostLog) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.hosts = append(h.hosts, r.URL.Host)
	h.mu.Unlock()
	return h.next.RoundTrip(r)
}

func (h *hostLog) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.hosts...)
}

// logBuffer collects a Loop's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The API key (or credentials in the URL) goes only over https or to a
// loopback address; anything else is refused when the Loop is built,
// before a request exists.
func TestLLMKeyOnlyOverHTTPSOrLoopback(t *testing.T) {
	t.Parallel()
	const key, pw = "sk-Key0Marker", "Pw0Marker"
	refused := []healer.LLMConfig{
		{URL: "http://llm.example.invalid/v1", Model: "m", APIKey: key},
		{URL: "HTTP://llm.example.invalid/v1", Model: "m", APIKey: key},
		{URL: "http://10.1.2.3:8000/v1", Model: "m", APIKey: key},
		{URL: "http://[2001:db8::1]:8000/v1", Model: "m", APIKey: key},
		{URL: "http://0.0.0.0:8000/v1", Model: "m", APIKey: key},
		{URL: "http://localhost.example.invalid/v1", Model: "m", APIKey: key},
		{URL: "http://127.0.0.1.example.invalid/v1", Model: "m", APIKey: key},
		{URL: "http://user:" + pw + "@llm.example.invalid/v1", Model: "m"}, // credentials in the URL, no key
	}
	for _, c := range refused {
		hl := &hostLog{next: http.DefaultTransport}
		c.HTTPClient = &http.Client{Transport: hl}
		_, err := healer.New(healer.Config{LLM: &c})
		require.ErrorIs(t, err, healer.ErrConfig, c.URL)
		assert.Contains(t, err.Error(), "only over https or to a loopback address", c.URL)
		assert.NotContains(t, err.Error(), pw)
		assert.NotContains(t, err.Error(), key)
		assert.Empty(t, hl.seen(), "nothing is sent")
	}
	allowed := []healer.LLMConfig{
		{URL: "https://llm.example.invalid/v1", Model: "m", APIKey: key},
		{URL: "http://127.0.0.1:8000/v1", Model: "m", APIKey: key},
		{URL: "http://127.9.9.9:8000/v1", Model: "m", APIKey: key},
		{URL: "http://[::1]:8000/v1", Model: "m", APIKey: key},
		{URL: "http://localhost:8000/v1", Model: "m", APIKey: key},
		{URL: "http://LocalHost./v1", Model: "m", APIKey: key},
		{URL: "http://user:" + pw + "@127.0.0.1:8000/v1", Model: "m"},
		{URL: "http://llm.example.invalid/v1", Model: "m"}, // no credentials to protect
	}
	for _, c := range allowed {
		_, err := healer.New(healer.Config{LLM: &c})
		assert.NoError(t, err, c.URL)
	}
}

// A redirect cannot take the key where the configuration could not: the
// loopback endpoint gets the key, the plain-http host it redirects to
// never gets a request.
func TestLLMRedirectKeepsKeySafe(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	var mu sync.Mutex
	var auths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Redirect(w, r, "http://llm.example.invalid/v1/chat/completions", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(srv.Close)
	hl := &hostLog{next: srv.Client().Transport}
	cfg := &healer.LLMConfig{URL: srv.URL + "/v1", Model: "test-model", APIKey: "sk-test-secret", HTTPClient: &http.Client{Transport: hl}}
	l := newLoop(t, healer.Config{LLM: cfg})
	res, err := l.Run(context.Background(), s.session(t, small(testsvc.TestImage), nil), spec(testsvc.TestImage, "cat /nonexistent/x"), llmMode, 20*time.Second)
	require.NoError(t, err)
	require.Len(t, res.Attempts, 1)
	assert.Contains(t, res.Attempts[0].Note, "the LLM repair endpoint could not be reached; see the worker log")
	assert.Equal(t, []string{srv.Listener.Addr().String()}, hl.seen(), "only the loopback endpoint was sent a request")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"Bearer sk-test-secret"}, auths, "over http to loopback, the key is sent")
}

// What the endpoint answers (an error body, an error inside a 200, a
// malformed document, a reply that is not a command) never reaches the
// job's result: the notes say what happened in the healer's own words,
// and the worker log keeps the detail, the key masked.
func TestLLMEndpointAnswerStaysOutOfResult(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	const marker = "Qx9EndpointMarker"
	cases := []struct {
		name, body string
		status     int
		note       string
		logged     bool // the marker is in the worker log
	}{
		{"500 with a body", `{"error":{"message":"` + marker + ` internal error"}}`, 500,
			"the LLM repair endpoint failed (HTTP 500); see the worker log", true},
		{"401 quoting the key", `{"error":{"message":"Incorrect API key provided: sk-test-secret ` + marker + `"}}`, 401,
			"the LLM repair endpoint failed (HTTP 401); see the worker log", true},
		{"error inside a 200", `{"error":{"message":"` + marker + ` upstream failed","code":500}}`, 200,
			"the LLM repair endpoint sent an unusable response (HTTP 200); see the worker log", true},
		{"empty choices and an error", `{"choices":[],"error":"` + marker + `"}`, 200,
			"the LLM repair endpoint sent an unusable response (HTTP 200); see the worker log", true},
		{"200 not JSON", marker + ` is not JSON`, 200,
			"the LLM repair endpoint sent an unusable response (HTTP 200); see the worker log", true},
		{"prose reply", chat("I cannot do that: "+marker+"\nreally\nnot", 10, 10), 200,
			"unusable llm reply: several lines outside a code block", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			llm := newFakeLLM(t, func(int, llmRequest) (int, string) { return tc.status, tc.body })
			var log logBuffer
			l := newLoop(t, healer.Config{LLM: llm.config(), Logger: slog.New(slog.NewTextHandler(&log, nil))})
			res, err := l.Run(context.Background(), s.session(t, small(testsvc.TestImage), nil), spec(testsvc.TestImage, "cat /nonexistent/x"), llmMode, 20*time.Second)
			require.NoError(t, err)
			require.Len(t, res.Attempts, 1)
			require.Equal(t, 1, llm.calls())
			assert.Contains(t, res.Attempts[0].Note, tc.note)
			attempts, err := json.Marshal(res.Attempts)
			require.NoError(t, err)
			assert.NotContains(t, string(attempts), marker, "the endpoint's answer is not in the job's attempts")
			assert.NotContains(t, fmt.Sprintf("%+v", res), marker, "nor anywhere in the result")
			if tc.logged {
				assert.Contains(t, log.String(), marker, "the worker log has the detail")
			}
			assert.NotContains(t, log.String(), "sk-test-secret", "the key is masked in the log")
		})
	}
}
