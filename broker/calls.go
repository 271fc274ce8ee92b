package broker

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/paddockhq/paddock/job"
)

// Rule names why the broker refused a call, or how the call failed. It is
// the X-Paddock-Broker-Rule header of the answer and Call.Rule.
type Rule string

// The rules. Refusals of the policy answer 403 unless noted; failures of
// the upstream side answer 502 or 504.
const (
	RuleUnknownGrant Rule = "unknown_grant" // the Host names no grant of the policy
	RuleTenant       Rule = "tenant"        // the job's tenant does not have the grant
	RuleNotRequested Rule = "not_requested" // the job did not ask for the grant
	RuleMethod       Rule = "method"        // a method the grant does not allow
	RulePath         Rule = "path"          // a path outside the grant's patterns, or one refused by normalisation
	RuleTarget       Rule = "request_target"
	RuleRequestSize  Rule = "request_size"  // 413: the body is over max_request_bytes
	RuleRate         Rule = "rate"          // 429: over the grant's rate for the job's tenant
	RuleInFlight     Rule = "in_flight"     // 429: too many calls of this job at once
	RuleEnded        Rule = "job_ended"     // the job's grants ended
	RuleSecret       Rule = "secret"        // 502: a secret of the grant is unavailable
	RuleUpstream     Rule = "upstream"      // 502: the request to the real system failed
	RuleTimeout      Rule = "timeout"       // 504: the grant's timeout passed
	RuleResponseSize Rule = "response_size" // 502: the response is over max_response_bytes
	RuleEncoding     Rule = "response_encoding"
	RulePartial      Rule = "partial_content" // 502: the upstream answered 206 (part of a resource)
)

// Headers of the broker's answers to the box.
const (
	// HeaderRule carries the Rule of a refused or failed call.
	HeaderRule = "X-Paddock-Broker-Rule"
	// HeaderRedacted counts the secrets the broker removed from a response
	// (headers dropped and body occurrences replaced with Redacted).
	HeaderRedacted = "X-Paddock-Broker-Redacted"
)

// Call is the record of one call of a job to the broker. It never holds a
// secret, a header value, a body or a query value.
type Call struct {
	Start  time.Time `json:"start"`
	Grant  string    `json:"grant"` // the Host the box named (cut to 64 bytes)
	Method string    `json:"method"`
	// Path is the decoded path under the grant (cut to 256 bytes), empty
	// when the request-target was refused; QueryKeys the names of its query
	// parameters, without their values.
	Path      string   `json:"path,omitempty"`
	QueryKeys []string `json:"query_keys,omitempty"`
	Status    int      `json:"status"` // the status the box got
	Rule      Rule     `json:"rule,omitempty"`
	Error     string   `json:"error,omitempty"` // the message the box got, for a refusal or failure
	BytesIn   int64    `json:"bytes_in"`        // request body bytes sent upstream
	BytesOut  int64    `json:"bytes_out"`       // response body bytes returned to the box
	Redacted  int      `json:"redacted,omitempty"`
	// DurationMS is the time from the request to the end of the answer.
	DurationMS int64 `json:"duration_ms"`
}

// DefaultMaxCalls is how many calls a CallLog keeps when its Max is 0.
const DefaultMaxCalls = 1000

// CallLog collects the calls of one job (JobInfo.Calls); it is safe for
// concurrent use, and its zero value is ready. Past Max calls it keeps
// counting (Dropped) but records no more: the job decides how many calls it
// makes, the worker how much of them it stores.
type CallLog struct {
	Max int // default DefaultMaxCalls

	mu      sync.Mutex
	calls   []Call
	dropped int
}

func (l *CallLog) add(c Call) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	limit := l.Max
	if limit <= 0 {
		limit = DefaultMaxCalls
	}
	if len(l.calls) >= limit {
		l.dropped++
		return
	}
	l.calls = append(l.calls, c)
}

// Calls returns a copy of the calls recorded so far, in the order they
// ended.
func (l *CallLog) Calls() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.calls)
	for i := range out {
		out[i].QueryKeys = slices.Clone(out[i].QueryKeys)
	}
	return out
}

// Dropped is the number of calls made past Max, not recorded.
func (l *CallLog) Dropped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Result is the log as a job's result lists it (job.Result.Broker).
func (l *CallLog) Result() *job.BrokerCalls {
	calls := l.Calls()
	out := &job.BrokerCalls{Calls: make([]job.BrokerCall, len(calls)), Dropped: l.Dropped()}
	for i, c := range calls {
		out.Calls[i] = job.BrokerCall{Start: c.Start.UTC(), Grant: c.Grant, Method: c.Method, Path: c.Path, QueryKeys: c.QueryKeys,
			Status: c.Status, Rule: string(c.Rule), Error: c.Error, BytesIn: c.BytesIn, BytesOut: c.BytesOut,
			Redacted: c.Redacted, DurationMS: c.DurationMS}
	}
	return out
}

// refusal is a refused or failed call: the answer the box gets.
type refusal struct {
	status int
	rule   Rule
	msg    string
}

func refuse(status int, rule Rule, msg string) *refusal {
	return &refusal{status: status, rule: rule, msg: msg}
}

func forbidden(rule Rule, msg string) *refusal { return refuse(http.StatusForbidden, rule, msg) }
