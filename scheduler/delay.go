package scheduler

import (
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"

	"github.com/paddockhq/paddock/job"
)

// notBefore reads a submission's job.HeaderNotBefore (zero when absent);
// a malformed value is a *job.ValidationError (the job is rejected).
func notBefore(hdr nats.Header) (time.Time, error) {
	return job.ParseNotBefore(hdr.Get(job.HeaderNotBefore))
}

// delay returns the asynq options that hold a task until notBefore, and the
// time the task becomes runnable (its queued-at header: the queue wait is
// measured from there). A time not in the future runs the job now. asynq
// keeps the time in whole Unix seconds (truncated), so it is rounded up:
// the job never starts before notBefore.
func (s *Scheduler) delay(notBefore time.Time) ([]asynq.Option, time.Time) {
	now := s.cfg.Now()
	if !notBefore.After(now) {
		return nil, now
	}
	at := notBefore.Truncate(time.Second)
	if at.Before(notBefore) {
		at = at.Add(time.Second)
	}
	return []asynq.Option{asynq.ProcessAt(at)}, at
}
