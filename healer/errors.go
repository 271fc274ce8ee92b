package healer

import (
	"errors"
	"fmt"
)

var (
	// ErrConfig is wrapped by every invalid Config.
	ErrConfig = errors.New("healer: invalid config")
	// ErrTokenBudget: the job spent its LLM token budget; no further call
	// is made for it.
	ErrTokenBudget = errors.New("healer: llm token budget of the job exhausted")
	// ErrNoFix: the LLM said it cannot fix the command.
	ErrNoFix = errors.New("healer: llm found no fix")
	// ErrBadReply is wrapped by every *ReplyError.
	ErrBadReply = errors.New("healer: unusable llm reply")
)

// ReplyError is an LLM reply the healer refused to run.
type ReplyError struct {
	// Reason says what was wrong: "empty", "identical to a previous
	// command", "too long", "contains a NUL byte", "several code blocks" …
	Reason string
}

func (e *ReplyError) Error() string { return "healer: unusable llm reply: " + e.Reason }

// Unwrap makes every ReplyError match ErrBadReply.
func (e *ReplyError) Unwrap() error { return ErrBadReply }

// LLMError is a failed call to the chat-completions endpoint. Its text
// quotes the endpoint's answer: it is for the worker log, never for a
// job's result.
type LLMError struct {
	// StatusCode is the HTTP status, 0 when no response arrived.
	StatusCode int
	// Body is the start of the response (at most 512 bytes, the API key
	// masked) when one arrived and was refused.
	Body string
	Err  error
}

func (e *LLMError) Error() string {
	switch {
	case e.StatusCode != 0 && e.Err != nil && e.Body != "":
		return fmt.Sprintf("healer: llm endpoint: status %d: %v; body: %s", e.StatusCode, e.Err, e.Body)
	case e.StatusCode != 0 && e.Err != nil:
		return fmt.Sprintf("healer: llm endpoint: status %d: %v", e.StatusCode, e.Err)
	case e.StatusCode != 0:
		return fmt.Sprintf("healer: llm endpoint: status %d: %s", e.StatusCode, e.Body)
	}
	return fmt.Sprintf("healer: llm endpoint: %v", e.Err)
}

func (e *LLMError) Unwrap() error { return e.Err }

// Retryable reports whether another call might succeed (no response, 429,
// 5xx). The loop never retries a call within a job; the flag is for
// callers and logs.
func (e *LLMError) Retryable() bool {
	return e.StatusCode == 0 || e.StatusCode == 429 || e.StatusCode >= 500
}
