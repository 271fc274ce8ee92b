package job

import (
	"strconv"
	"time"
)

// State is the coarse outcome of a job.
type State string

const (
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateRejected  State = "rejected"
	StateCanceled  State = "canceled"
	StateInfra     State = "infra"
)

// Reason is the one cause of a terminal state (docs/job-contract.md). The set is closed.
type Reason string

const (
	ReasonOK          Reason = "ok"
	ReasonExitNonzero Reason = "exit_nonzero"
	ReasonTimeout     Reason = "timeout"
	ReasonOOM         Reason = "oom"
	ReasonPidsLimit   Reason = "pids_limit"
	ReasonOutputCap   Reason = "output_cap"
	ReasonFsize       Reason = "fsize"
	ReasonSignal      Reason = "signal"
	ReasonLeaseLost   Reason = "lease_lost"
	ReasonCanceled    Reason = "canceled"
	ReasonRejected    Reason = "rejected"
	ReasonInfra       Reason = "infra"
)

// Reasons lists every Reason, in documentation order.
var Reasons = []Reason{
	ReasonOK, ReasonExitNonzero, ReasonTimeout, ReasonOOM, ReasonPidsLimit,
	ReasonOutputCap, ReasonFsize, ReasonSignal, ReasonLeaseLost, ReasonCanceled,
	ReasonRejected, ReasonInfra,
}

// Valid reports whether r is one of Reasons.
func (r Reason) Valid() bool {
	for _, x := range Reasons {
		if r == x {
			return true
		}
	}
	return false
}

// State maps a reason to the job state it implies.
func (r Reason) State() State {
	switch r {
	case ReasonOK:
		return StateSucceeded
	case ReasonRejected:
		return StateRejected
	case ReasonCanceled:
		return StateCanceled
	case ReasonInfra:
		return StateInfra
	default:
		return StateFailed
	}
}

// Output is one captured stream: whole when it fits the cap, otherwise its
// head in Text and its tail in Tail, with OmittedBytes dropped in between.
type Output struct {
	Text         string `json:"text"`
	Tail         string `json:"tail,omitempty"`
	Bytes        int64  `json:"bytes"`
	Truncated    bool   `json:"truncated,omitempty"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty"`
}

// String joins head and tail with a marker naming the omitted byte count.
func (o Output) String() string {
	if !o.Truncated {
		return o.Text
	}
	return o.Text + "\n…[" + strconv.FormatInt(o.OmittedBytes, 10) + " bytes omitted]…\n" + o.Tail
}

// Action says why an attempt ran.
type Action string

const (
	ActionInitial Action = "initial" // the job's own command
	ActionInstall Action = "install" // retry after installing a missing tool
	ActionRules   Action = "rules"   // retry with a rule-based repair
	ActionLLM     Action = "llm"     // retry with an LLM repair
	ActionMemo    Action = "memo"    // retry with a remembered repair
)

// Attempt is one command run inside the job's container.
type Attempt struct {
	N          int       `json:"n"`
	Action     Action    `json:"action"`
	Command    string    `json:"command"`
	ExitCode   int       `json:"exit_code"`
	Reason     Reason    `json:"reason"`
	StderrTail string    `json:"stderr_tail,omitempty"`
	Install    string    `json:"install,omitempty"` // installer command run before this attempt
	Note       string    `json:"note,omitempty"`    // what the healer decided and why
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
}

// Result is the one terminal record of a job.
type Result struct {
	V        int          `json:"v"`
	ID       string       `json:"id"`
	Tenant   string       `json:"tenant,omitempty"` // the job's tenant (empty: DefaultTenant)
	State    State        `json:"state"`
	Reason   Reason       `json:"reason"`
	Error    string       `json:"error,omitempty"`  // what happened and what to do (rejected, infra, …)
	Errors   []FieldError `json:"errors,omitempty"` // every validation failure (rejected)
	ExitCode *int         `json:"exit_code,omitempty"`
	Stdout   Output       `json:"stdout"`
	Stderr   Output       `json:"stderr"`
	Attempts []Attempt    `json:"attempts,omitempty"`

	// Kept names the complete output in the tenant's output bucket, when
	// it was kept; Artifacts the files collected; Refused the files (or
	// patterns) that were not, with why.
	Kept      *Kept     `json:"kept,omitempty"`
	Artifacts []Object  `json:"artifacts,omitempty"`
	Refused   []Refusal `json:"refused,omitempty"`
	// Spilled names the output spilled into the workspace (output.spill),
	// for the last command; VolumeBytes is the size of the job's volume
	// when it ended, when the volume has a max_bytes (a deleted volume is
	// 0, and left out).
	Spilled     *Spilled `json:"spilled,omitempty"`
	VolumeBytes int64    `json:"volume_bytes,omitempty"`
	// Broker lists the job's calls to the secrets broker (spec.grants),
	// without any secret, header value, body or query value.
	Broker *BrokerCalls `json:"broker,omitempty"`

	SubmittedAt time.Time `json:"submitted_at,omitzero"`
	QueuedAt    time.Time `json:"queued_at,omitzero"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	FinishedAt  time.Time `json:"finished_at,omitzero"`

	Worker       string            `json:"worker,omitempty"`
	Image        string            `json:"image,omitempty"`
	Queue        string            `json:"queue,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Limits       *Effective        `json:"limits,omitempty"`
	FencingToken int64             `json:"fencing_token,omitempty"`
	LockWaitMS   int64             `json:"lock_wait_ms,omitempty"`
	// Runs counts how many times a worker started this job (re-runs after a
	// worker crash or an infrastructure failure appear here).
	Runs int `json:"runs,omitempty"`
}

// Finish fills State from Reason and stamps the version.
func (r *Result) Finish(reason Reason) {
	r.V = Version
	r.Reason = reason
	r.State = reason.State()
}

// BrokerCalls are a job's calls to the secrets broker: the first
// MaxBrokerCalls, and how many more were made (Dropped).
type BrokerCalls struct {
	Calls   []BrokerCall `json:"calls"`
	Dropped int          `json:"dropped,omitempty"`
}

// MaxBrokerCalls is how many broker calls a result lists.
const MaxBrokerCalls = 100

// BrokerCall is one call of a job's box to the secrets broker: the grant
// (the Host the box named), the method and path under it, the status the
// box got, the rule that refused it (if one did) and the message, and the
// body bytes each way. It never holds a secret.
type BrokerCall struct {
	Start      time.Time `json:"start"`
	Grant      string    `json:"grant"`
	Method     string    `json:"method"`
	Path       string    `json:"path,omitempty"`
	QueryKeys  []string  `json:"query_keys,omitempty"`
	Status     int       `json:"status"`
	Rule       string    `json:"rule,omitempty"`
	Error      string    `json:"error,omitempty"`
	BytesIn    int64     `json:"bytes_in"`
	BytesOut   int64     `json:"bytes_out"`
	Redacted   int       `json:"redacted,omitempty"`
	DurationMS int64     `json:"duration_ms"`
}
