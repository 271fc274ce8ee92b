package healer_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/healer"
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
