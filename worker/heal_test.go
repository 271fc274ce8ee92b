package worker_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/worker"
)

// The heal loop through the whole fleet: an LLM repair (an
// OpenAI-compatible server in the test; no model runs here), the memo
// answering identical failures without the LLM, and a fork bomb that is
// never retried even with every permission.
func TestHealThroughTheFleet(t *testing.T) {
	var calls atomic.Int64
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, _ := json.Marshal(map[string]any{
			"choices": []map[string]any{{"message": map[string]string{"role": "assistant", "content": "```sh\ngrep -E 'ro+t' /etc/passwd\n```"}}},
			"usage":   map[string]int{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})
		_, _ = w.Write(b)
	}))
	t.Cleanup(llm.Close)
	s := newStackRedis(t, func(c *worker.Config, rdb *redis.Client) {
		memo, err := healer.NewRedisMemo(rdb, healer.RedisMemoConfig{})
		require.NoError(t, err)
		h, err := healer.New(healer.Config{LLM: &healer.LLMConfig{URL: llm.URL + "/v1", Model: "m", HTTPClient: llm.Client()},
			Memo: memo, SpanAttributes: worker.SandboxSpanAttributes})
		require.NoError(t, err)
		c.Healer = h
	})

	// busybox grep has no -P: the first attempt fails, the LLM's command works.
	for i := range 3 {
		r := s.run(job.Spec{Command: "grep -P 'ro+t' /etc/passwd", Heal: &job.HealPolicy{Mode: job.HealLLM}})
		require.Equal(t, job.ReasonOK, r.Reason, "job %d: %s", i, r.Error)
		require.Len(t, r.Attempts, 2)
		assert.Equal(t, job.ActionInitial, r.Attempts[0].Action)
		assert.NotEqual(t, job.ReasonOK, r.Attempts[0].Reason)
		assert.Equal(t, "grep -E 'ro+t' /etc/passwd", r.Attempts[1].Command)
		assert.Contains(t, r.Stdout.Text, "root")
		if i == 0 {
			assert.Equal(t, job.ActionLLM, r.Attempts[1].Action)
		} else {
			assert.Equal(t, job.ActionMemo, r.Attempts[1].Action, "identical failures are healed from the memo")
		}
	}
	assert.EqualValues(t, 1, calls.Load(), "one LLM call for three identical failures")

	// Heal off: one attempt, the job's own failure.
	r := s.run(job.Spec{Command: "grep -P 'ro+t' /etc/passwd", Heal: &job.HealPolicy{Mode: job.HealOff}})
	assert.Equal(t, job.StateFailed, r.State)
	assert.Len(t, r.Attempts, 1)

	pids := int64(32)
	r = s.run(job.Spec{Command: ":(){ :|:& };:; sleep 60", Limits: job.Limits{Pids: &pids},
		Heal: &job.HealPolicy{Mode: job.HealLLM}})
	assert.Equal(t, job.ReasonPidsLimit, r.Reason)
	assert.Len(t, r.Attempts, 1, "a fork bomb ends as pids_limit, not in a retry loop")
	assert.EqualValues(t, 1, calls.Load())
}
