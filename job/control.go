package job

import (
	"fmt"
	"time"
)

// Control requests: cancel, and scheduling options carried in headers.
const (
	// A cancel is a NATS request on CancelRequestSubject(tenant); the
	// schedulers answer SubjectCancelRequests in queue group QueueCancelers
	// (one answers each request). The request is a CancelRequest, the reply
	// a CancelReply.

	// QueueCancelers is the queue group of the cancel responders.
	QueueCancelers = "paddock-schedulers"

	// HeaderNotBefore on a submission delays the job: it is not started
	// before this RFC 3339 time (the scheduler enqueues it with
	// asynq.ProcessAt). A time in the past runs the job now.
	HeaderNotBefore = "Paddock-Not-Before"
)

// CancelRequest asks the fleet to cancel job ID.
type CancelRequest struct {
	ID string `json:"id"`
}

// CancelOutcome says what a cancel request did.
type CancelOutcome string

const (
	// CancelQueued: the job was waiting in the queue (pending, delayed or
	// waiting for a retry); it was removed and its result is `canceled`.
	CancelQueued CancelOutcome = "canceled"
	// CancelKilling: the job is running; its worker kills its container and
	// records `canceled`.
	CancelKilling CancelOutcome = "killing"
	// CancelFinished: the job had already ended; State and Reason say how.
	// Nothing was changed.
	CancelFinished CancelOutcome = "finished"
	// CancelFlagged: the job is not in the queue yet (its submission is
	// still in JetStream), or the id is unknown. The cancel flag is set for
	// the result retention: a submission with this id ends `canceled` as
	// soon as a scheduler or worker reaches it.
	CancelFlagged CancelOutcome = "flagged"
)

// CancelReply is the answer to a CancelRequest.
type CancelReply struct {
	ID      string        `json:"id"`
	Outcome CancelOutcome `json:"outcome,omitempty"`
	// State and Reason of the job's result when Outcome is CancelFinished
	// or CancelQueued.
	State  State  `json:"state,omitempty"`
	Reason Reason `json:"reason,omitempty"`
	// Message explains the outcome in one line.
	Message string `json:"message,omitempty"`
	// Error is set when the cancel could not be carried out (then Outcome
	// is empty); retrying is safe.
	Error string `json:"error,omitempty"`
}

// FormatNotBefore renders t as HeaderNotBefore's value.
func FormatNotBefore(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ParseNotBefore parses HeaderNotBefore's value; "" is the zero time.
func ParseNotBefore(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, &ValidationError{Fields: []FieldError{{Field: HeaderNotBefore,
			Message: fmt.Sprintf("header %q is not an RFC 3339 time (e.g. 2006-01-02T15:04:05Z)", v)}}}
	}
	return t, nil
}
