package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// TestDelayedJob: a submission with Paddock-Not-Before is held in the queue
// (asynq "scheduled") until then; a past time runs it now; a malformed
// header rejects the job.
func TestDelayedJob(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, testConfig())

	at := time.Now().Add(time.Hour).Truncate(time.Second)
	sub, err := s.client.Submit(context.Background(), job.Spec{Command: "echo later"}, client.NotBefore(at))
	require.NoError(t, err)
	info := s.task(job.DefaultQueue, sub.ID)
	assert.Equal(t, asynq.TaskStateScheduled, info.State)
	assert.True(t, info.NextProcessAt.Equal(at), "next process at %s, want %s", info.NextProcessAt, at)

	// asynq keeps whole seconds: a fractional time is rounded up, never down.
	frac := at.Add(300 * time.Millisecond)
	fs, err := s.client.Submit(context.Background(), job.Spec{Command: "echo frac"}, client.NotBefore(frac))
	require.NoError(t, err)
	fi := s.task(job.DefaultQueue, fs.ID)
	assert.True(t, fi.NextProcessAt.Equal(at.Add(time.Second)), "state %s, next process at %s, want %s (frac %s)",
		fi.State, fi.NextProcessAt, at.Add(time.Second), frac)

	past, err := s.client.Submit(context.Background(), job.Spec{Command: "echo now"}, client.NotBefore(time.Now().Add(-time.Minute)))
	require.NoError(t, err)
	assert.Equal(t, asynq.TaskStatePending, s.task(job.DefaultQueue, past.ID).State)

	subs, err := s.client.SubmitBatch(context.Background(), []job.Spec{{Command: "a"}, {Command: "b"}}, nil, client.NotBefore(at))
	require.NoError(t, err)
	for _, b := range subs {
		assert.Equal(t, asynq.TaskStateScheduled, s.task(job.DefaultQueue, b.ID).State)
	}

	msg := nats.NewMsg(job.SubmitSubject(job.DefaultTenant))
	msg.Data = []byte(`{"id": "bad-delay", "command": "echo"}`)
	msg.Header.Set(job.HeaderNotBefore, "tomorrow")
	_, err = s.js.PublishMsg(context.Background(), msg)
	require.NoError(t, err)
	r := s.result("bad-delay")
	assert.Equal(t, job.StateRejected, r.State)
	assert.True(t, hasField(r.Errors, job.HeaderNotBefore), "%+v", r.Errors)
}
