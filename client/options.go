package client

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddockhq/paddock/job"
)

// SubmitOption sets a scheduling option of a submission (a header of its
// message; the spec itself is unchanged).
type SubmitOption func(*nats.Msg)

// NotBefore delays the job: it is queued at once but does not start before
// t (header job.HeaderNotBefore; the scheduler holds the task in the queue
// until then). A zero or past t runs the job as soon as possible. Cancel
// removes a delayed job before it starts.
func NotBefore(t time.Time) SubmitOption {
	return func(m *nats.Msg) {
		if !t.IsZero() {
			m.Header.Set(job.HeaderNotBefore, job.FormatNotBefore(t))
		}
	}
}

func applyOptions(m *nats.Msg, opts []SubmitOption) {
	for _, o := range opts {
		o(m)
	}
}
