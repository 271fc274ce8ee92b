package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

func TestEnqueuesValidJob(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := testConfig()
	cfg.Tracer = tp.Tracer("scheduler")
	s.scheduler(s.enq, cfg)

	ctx, root := tp.Tracer("pipeline").Start(context.Background(), "pipeline")
	sub, err := s.client.Submit(ctx, job.Spec{ID: "valid-1", Command: "echo hi", Queue: "other", Labels: map[string]string{"team": "a"}})
	root.End()
	require.NoError(t, err)

	info := s.task("other", "valid-1")
	assert.Equal(t, job.TaskType, info.Type)
	assert.Equal(t, "other", info.Queue)
	assert.Equal(t, 3, info.MaxRetry)
	assert.Equal(t, 300*time.Second+scheduler.TaskTimeoutMargin, info.Timeout)
	assert.Equal(t, 24*time.Hour, info.Retention)
	spec, err := job.Decode(info.Payload)
	require.NoError(t, err, "the payload is a strict spec")
	assert.Equal(t, "valid-1", spec.ID)
	assert.Equal(t, job.Version, spec.V)
	assert.Equal(t, "other", spec.Queue)
	assert.Equal(t, job.DefaultImage, spec.Image, "normalized")
	assert.Equal(t, "a", spec.Labels["team"])
	assert.False(t, spec.SubmittedAt.IsZero())

	// One trace: pipeline → paddock.submit → paddock.schedule → the task.
	traceID := root.SpanContext().TraceID()
	tp2 := info.Headers["traceparent"]
	require.NotEmpty(t, tp2, "task headers carry the trace context")
	assert.Contains(t, tp2, traceID.String())
	s.drained()

	var sched sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, sp := range rec.Ended() {
			if sp.Name() == "paddock.schedule" {
				sched = sp
				return true
			}
		}
		return false
	}, wait, 10*time.Millisecond)
	assert.Equal(t, trace.SpanKindConsumer, sched.SpanKind())
	assert.Equal(t, traceID, sched.SpanContext().TraceID(), "the schedule span continues the submitter's trace")
	assert.Contains(t, tp2, sched.SpanContext().SpanID().String(), "the task's parent is the schedule span")
	attrs := map[string]string{}
	for _, kv := range sched.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	assert.Equal(t, "valid-1", attrs["paddock.job.id"])
	assert.Equal(t, "other", attrs["paddock.queue"])
	assert.Equal(t, "enqueued", attrs["paddock.outcome"])
	assert.Equal(t, sub.ID, "valid-1")
}

// Every class of invalid submission ends with a `rejected` result naming
// the field, readable through the SDK, and no task.
func TestRejectsInvalidJobs(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, testConfig())

	cases := []struct {
		name, id, msgID, field string
		body                   string
	}{
		{name: "malformed JSON", id: "r-malformed", msgID: "r-malformed", field: "spec", body: `{"command":`},
		{name: "not an object", id: "r-array", msgID: "r-array", field: "spec", body: `[1,2]`},
		{name: "unknown field (id still found)", id: "r-unknown", field: "comand", body: `{"id":"r-unknown","command":"x","comand":"y"}`},
		{name: "wrong type", id: "r-type", msgID: "r-type", field: "command", body: `{"id":"r-type","command":5}`},
		{name: "trailing data", id: "r-trailing", field: "spec", body: `{"id":"r-trailing","command":"x"} {}`},
		{name: "NUL byte in document", id: "r-nul", msgID: "r-nul", field: "spec", body: "{\"id\":\"r-nul\",\"command\":\"a\x00b\"}"},
		{name: "NUL escape in command", id: "r-nul2", field: "command", body: `{"id":"r-nul2","command":"a\u0000b"}`},
		{name: "invalid UTF-8", id: "r-utf8", msgID: "r-utf8", field: "spec", body: "{\"id\":\"r-utf8\",\"command\":\"\xff\"}"},
		{name: "document too large", id: "r-big", field: "spec", body: `{"id":"r-big","command":"` + strings.Repeat("x", job.MaxSpecBytes) + `"}`},
		{name: "empty command", id: "r-empty", field: "command", body: `{"id":"r-empty","command":""}`},
		{name: "command too long", id: "r-long", field: "command", body: `{"id":"r-long","command":"` + strings.Repeat("x", job.MaxCommandBytes+1) + `"}`},
		{name: "unsupported version", id: "r-v2", field: "v", body: `{"v":2,"id":"r-v2","command":"x"}`},
		{name: "image not allowed", id: "r-image", field: "image", body: `{"id":"r-image","command":"x","image":"evil:latest"}`},
		{name: "unknown queue", id: "r-queue", field: "queue", body: `{"id":"r-queue","command":"x","queue":"vip"}`},
		{name: "reserved env", id: "r-env", field: "env", body: `{"id":"r-env","command":"x","env":{"LD_PRELOAD":"/x.so"}}`},
		{name: "bad env name", id: "r-envname", field: "env", body: `{"id":"r-envname","command":"x","env":{"1A":"x"}}`},
		{name: "relative workdir", id: "r-workdir", field: "workdir", body: `{"id":"r-workdir","command":"x","workdir":"tmp"}`},
		{name: "memory over cap", id: "r-mem", field: "limits.memory_mb", body: `{"id":"r-mem","command":"x","limits":{"memory_mb":999999}}`},
		{name: "zero pids", id: "r-pids", field: "limits.pids", body: `{"id":"r-pids","command":"x","limits":{"pids":0}}`},
		{name: "cpus over cap", id: "r-cpu", field: "limits.cpus", body: `{"id":"r-cpu","command":"x","limits":{"cpus":64}}`},
		{name: "command timeout over job timeout", id: "r-timeout", field: "limits.command_timeout_s", body: `{"id":"r-timeout","command":"x","limits":{"command_timeout_s":100,"job_timeout_s":50}}`},
		{name: "bad label", id: "r-label", field: "labels", body: `{"id":"r-label","command":"x","labels":{"-bad-":"x"}}`},
		{name: "heal mode", id: "r-heal", field: "heal.mode", body: `{"id":"r-heal","command":"x","heal":{"mode":"magic"}}`},
		{name: "install not allowed", id: "r-install", field: "heal.allow_install", body: `{"id":"r-install","command":"x","heal":{"allow_install":true}}`},
		{name: "volumes disabled", id: "r-volume", field: "volume", body: `{"id":"r-volume","command":"x","volume":{"name":"ws"}}`},
		{name: "invalid id, valid header", id: "r-header", msgID: "r-header", field: "id", body: `{"id":"bad id!","command":"x"}`},
	}
	for _, tc := range cases {
		s.publishRaw([]byte(tc.body), tc.msgID)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.result(tc.id)
			assert.Equal(t, job.StateRejected, r.State)
			assert.Equal(t, job.ReasonRejected, r.Reason)
			assert.Equal(t, tc.id, r.ID)
			assert.True(t, hasField(r.Errors, tc.field), "errors %v name %q", r.Errors, tc.field)
			assert.NotEmpty(t, r.Error)
			assert.NotContains(t, r.Error, "\n", "one line")
			assert.False(t, r.SubmittedAt.IsZero())
			s.noTask("default", tc.id)
		})
	}
	s.drained()
	assert.Zero(t, s.enq.total())
}

// A submission whose id is invalid and that has no usable Nats-Msg-Id gets
// an id derived from its stream sequence.
func TestRejectedDerivedID(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, testConfig())
	sub, err := s.nc.SubscribeSync(job.SubjectResultPrefix + ">")
	require.NoError(t, err)
	require.NoError(t, s.nc.Flush())
	ack := s.publishRaw([]byte(`{"id":"bad id!","command":"x"}`), "")
	msg, err := sub.NextMsg(wait)
	require.NoError(t, err)
	var r job.Result
	require.NoError(t, json.Unmarshal(msg.Data, &r))
	assert.True(t, strings.HasPrefix(r.ID, fmt.Sprintf("rej-%d-", ack.Sequence)), r.ID)
	assert.True(t, job.ValidID(r.ID))
	assert.Equal(t, job.StateRejected, r.State)
	assert.True(t, hasField(r.Errors, "id"))
	got := s.result(r.ID)
	assert.Equal(t, r, got)
}

func TestServerAssignsMissingIDs(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, testConfig())
	ack := s.publishRaw([]byte(`{"command":"echo no id"}`), "")
	s.publishRaw([]byte(`{"command":"echo header id"}`), "from-header-1")
	s.task("default", "from-header-1")
	s.drained()
	ids := s.pending("default")
	require.Len(t, ids, 2)
	var derived string
	for _, id := range ids {
		if id != "from-header-1" {
			derived = id
		}
	}
	assert.True(t, strings.HasPrefix(derived, fmt.Sprintf("j-%d-", ack.Sequence)), derived)
	assert.True(t, job.ValidID(derived))
	info := s.task("default", derived)
	spec, err := job.Decode(info.Payload)
	require.NoError(t, err)
	assert.Equal(t, derived, spec.ID, "the payload carries the assigned id")
}

func TestDuplicateSubmissionsEnqueueOnce(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	cfg := testConfig()
	cfg.Concurrency = 8
	s.scheduler(s.enq, cfg)
	ctx := context.Background()

	// 100 concurrent SDK submissions of one id: JetStream keeps one.
	var wg sync.WaitGroup
	var mu sync.Mutex
	fresh := 0
	for range 100 {
		wg.Go(func() {
			sub, err := s.client.Submit(ctx, job.Spec{ID: "dup-sdk", Command: "echo once"})
			assert.NoError(t, err)
			if err == nil && !sub.Duplicate {
				mu.Lock()
				fresh++
				mu.Unlock()
			}
		})
	}
	// 100 concurrent raw submissions without Nats-Msg-Id: all stored, the
	// scheduler must enqueue one.
	for range 100 {
		wg.Go(func() {
			_, err := s.js.Publish(ctx, job.SubmitSubject(job.DefaultTenant), []byte(`{"id":"dup-raw","command":"echo once"}`))
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, 1, fresh, "one SDK submission stored")

	s.task("default", "dup-sdk")
	s.task("default", "dup-raw")
	s.drained()
	assert.Equal(t, 1, s.enq.successes("dup-sdk"))
	assert.Equal(t, 1, s.enq.successes("dup-raw"))

	// The same id in another queue is still the same job.
	s.publishRaw([]byte(`{"id":"dup-raw","command":"echo once","queue":"other"}`), "")
	// An invalid resubmission must not become the live job's result.
	s.publishRaw([]byte(`{"id":"dup-raw","command":""}`), "")
	s.drained()
	s.noTask("other", "dup-raw")
	_, err := s.store.Get(ctx, taskKey("dup-raw"))
	require.ErrorIs(t, err, results.ErrNotFound, "no rejected result for a live job")
	assert.Equal(t, []string{"dup-raw", "dup-sdk"}, sorted(s.pending("default")))
}

func TestFinishedJobResubmitted(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, testConfig())
	done := job.Result{ID: "fin-1"}
	done.Finish(job.ReasonOK)
	_, _, err := s.store.Record(context.Background(), done)
	require.NoError(t, err)
	s.submit(job.Spec{ID: "fin-1", Command: "echo again"})
	s.drained()
	s.noTask("default", "fin-1")
	assert.Zero(t, s.enq.total())
}

func TestCanceledBeforeScheduling(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.scheduler(s.enq, testConfig())
	require.NoError(t, s.store.Cancel(context.Background(), taskKey("cx-1")))
	s.submit(job.Spec{ID: "cx-1", Command: "sleep 100", Queue: "other", Labels: map[string]string{"k": "v"}})
	r := s.result("cx-1")
	assert.Equal(t, job.StateCanceled, r.State)
	assert.Equal(t, job.ReasonCanceled, r.Reason)
	assert.Equal(t, "other", r.Queue)
	assert.Equal(t, "v", r.Labels["k"])
	s.drained()
	s.noTask("other", "cx-1")
}

// A job that can never be enqueued (while Redis works) ends as `infra`
// after MaxDeliver deliveries instead of looping.
func TestGivesUpAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.enq.fail = func(id string) error {
		if strings.HasPrefix(id, "poison-") {
			return fmt.Errorf("boom")
		}
		return nil
	}
	cfg := testConfig()
	cfg.MaxDeliver = 3
	s.scheduler(s.enq, cfg)
	s.submit(job.Spec{ID: "poison-1", Command: "x", Labels: map[string]string{"k": "v"}})
	s.submit(job.Spec{ID: "fine-1", Command: "x"})

	r := s.result("poison-1")
	assert.Equal(t, job.StateInfra, r.State)
	assert.Equal(t, job.ReasonInfra, r.Reason)
	assert.Contains(t, r.Error, "boom")
	assert.Contains(t, r.Error, "3 deliveries")
	assert.Equal(t, "v", r.Labels["k"])
	s.task("default", "fine-1")
	s.drained()
	assert.Equal(t, 3, s.enq.failuresOf("poison-1"))
	s.noTask("default", "poison-1")
}

func sorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
