package job

import (
	"time"
	"unicode/utf8"
)

// The job list: a summary of every job of the retention, kept by the
// results store's index, listed through the schedulers (a NATS request on
// JobsRequestSubject(tenant), answered in queue group QueueListers) and by
// the gateway (GET /v1/jobs, GET /v1/events).

// States a job has before its terminal one (a Summary's State; a Result's is
// always terminal).
const (
	StateQueued  State = "queued"  // accepted by a scheduler, waiting in its queue (or delayed)
	StateRunning State = "running" // a worker started it (again, after a re-run)
)

// MaxSummaryCommand bounds Summary.Command, in runes.
const MaxSummaryCommand = 200

// Bounds of a list request.
const (
	// DefaultListLimit is ListQuery.Limit when it is 0; MaxListLimit the
	// largest allowed.
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// Summary is one line of the job list: what the job is and where it
// stands. It is built from the index, not the result, so it exists from
// the moment a scheduler accepts the job.
type Summary struct {
	ID         string            `json:"id"`
	Tenant     string            `json:"tenant"`
	State      State             `json:"state"`
	Reason     Reason            `json:"reason,omitempty"` // set with a terminal state
	Queue      string            `json:"queue,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Command    string            `json:"command,omitempty"` // the first MaxSummaryCommand runes
	Image      string            `json:"image,omitempty"`
	QueuedAt   time.Time         `json:"queued_at,omitzero"`
	StartedAt  time.Time         `json:"started_at,omitzero"`
	FinishedAt time.Time         `json:"finished_at,omitzero"`
	Runs       int               `json:"runs,omitempty"`
	ExitCode   *int              `json:"exit_code,omitempty"`
	// UpdatedAt is when the index last changed this summary, by the index's
	// clock (Redis's): ListQuery.Since and Changes compare against it.
	UpdatedAt time.Time `json:"updated_at"`
}

// Key is the fleet-wide name of the summary's job (Key).
func (s *Summary) Key() string { return Key(s.Tenant, s.ID) }

// Terminal reports whether the state is a final one (the job has a result).
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateRejected, StateCanceled, StateInfra:
		return true
	}
	return false
}

// ValidState reports whether s is a state a Summary may have.
func ValidState(s State) bool { return s == StateQueued || s == StateRunning || s.Terminal() }

// ShortCommand is cmd cut to MaxSummaryCommand runes.
func ShortCommand(cmd string) string {
	if utf8.RuneCountInString(cmd) <= MaxSummaryCommand {
		return cmd
	}
	n := 0
	for i := range cmd {
		if n == MaxSummaryCommand {
			return cmd[:i]
		}
		n++
	}
	return cmd
}

// ListQuery asks for one page of a tenant's jobs, newest (by queued time)
// first. Every filter is optional; a summary must match all those given.
type ListQuery struct {
	// Tenant whose jobs are listed; set by the lister from the request's
	// subject, never by the requester. "" (only for the fleet's own
	// callers) lists every tenant's.
	Tenant   string `json:"tenant,omitempty"`
	State    State  `json:"state,omitempty"`
	Reason   Reason `json:"reason,omitempty"`
	Queue    string `json:"queue,omitempty"`
	Label    string `json:"label,omitempty"`     // "key=value", or "key": has the label
	IDPrefix string `json:"id_prefix,omitempty"` // the id starts with it
	// Cursor is a previous page's NextCursor: the page after it.
	Cursor string `json:"cursor,omitempty"`
	// Limit of summaries per page: DefaultListLimit when 0, at most
	// MaxListLimit.
	Limit int `json:"limit,omitempty"`
}

// Check validates q's fields (Tenant aside) and fills Limit's default.
func (q *ListQuery) Check() error {
	var fields []FieldError
	if q.State != "" && !ValidState(q.State) {
		fields = append(fields, FieldError{Field: "state", Message: "unknown state " + quoteShort(string(q.State)) +
			": want queued, running, succeeded, failed, rejected, canceled or infra"})
	}
	if q.Reason != "" && !q.Reason.Valid() {
		fields = append(fields, FieldError{Field: "reason", Message: "unknown reason " + quoteShort(string(q.Reason)) +
			" (docs/job-contract.md lists them)"})
	}
	if len(q.Queue) > 64 || len(q.Label) > 256 || len(q.IDPrefix) > 128 || len(q.Cursor) > 512 {
		fields = append(fields, FieldError{Field: "query", Message: "queue (64), label (256), id prefix (128) or cursor (512 bytes) too long"})
	}
	switch {
	case q.Limit == 0:
		q.Limit = DefaultListLimit
	case q.Limit < 0 || q.Limit > MaxListLimit:
		fields = append(fields, FieldError{Field: "limit", Message: "must be 1 to 200"})
	}
	if len(fields) > 0 {
		return &ValidationError{Fields: fields}
	}
	return nil
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return `"` + s + `"`
}

// ListPage is one page of the list. NextCursor, when not empty, names the
// page after it; a page may be shorter than the limit (even empty) and
// still have one, when the lister stopped after scanning its bound of
// index entries.
type ListPage struct {
	Jobs       []Summary `json:"jobs"`
	NextCursor string    `json:"next_cursor"`
}

// ChangesQuery asks for the tenant's summaries updated at or after Since,
// oldest change first, at most Limit (DefaultListLimit when 0, at most
// MaxListLimit) plus any more changed in the same instant as the last.
type ChangesQuery struct {
	Since time.Time `json:"since"`
	Limit int       `json:"limit,omitempty"`
}

// ListRequest is the body of a request on JobsRequestSubject: a list
// query, or, with Changes set, a changes query.
type ListRequest struct {
	ListQuery
	Changes *ChangesQuery `json:"changes,omitempty"`
}

// ListReply answers a ListRequest: a page, or Error (with Fields when the
// request was invalid).
type ListReply struct {
	ListPage
	Error  string       `json:"error,omitempty"`
	Fields []FieldError `json:"fields,omitempty"`
}

const (
	// SubjectJobsRequestPrefix + tenant is a tenant's list request subject;
	// schedulers answer SubjectJobsRequests in queue group QueueListers.
	SubjectJobsRequestPrefix = "paddock.api.jobs."
	SubjectJobsRequests      = SubjectJobsRequestPrefix + "*"
	// QueueListers is the queue group of the list responders.
	QueueListers = "paddock-schedulers"
)

// JobsRequestSubject is the subject tenant sends list requests to.
func JobsRequestSubject(tenant string) string { return SubjectJobsRequestPrefix + tenant }

// TenantFromJobsSubject returns the tenant of a list request subject.
func TenantFromJobsSubject(subject string) (string, bool) {
	return tenantAfter(SubjectJobsRequestPrefix, subject)
}
