package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/internal/retrydelay"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/telemetry"
)

// Claimer is the part of *results.Store that keeps the id claim: the first
// submission of a job key holds it, a redelivery of the same message (the
// same owner) keeps it, any other submission of the key is a duplicate.
type Claimer interface {
	Claim(ctx context.Context, key, owner string) (holder string, ok bool, err error)
}

// CancelFlags is the part of *results.Store that reads the cancel flag: a
// job canceled before it was scheduled is recorded canceled, never queued.
type CancelFlags interface {
	Canceled(ctx context.Context, key string) (bool, error)
}

// Outcome is what the scheduler did with one message; it is the
// "paddock.outcome" span attribute.
type Outcome string

const (
	OutcomeEnqueued  Outcome = "enqueued"  // task in Redis; acked
	OutcomeDuplicate Outcome = "duplicate" // id already scheduled or finished; acked
	OutcomeRejected  Outcome = "rejected"  // rejected result recorded; acked
	OutcomeCanceled  Outcome = "canceled"  // canceled before scheduling; result recorded; acked
	OutcomeRetry     Outcome = "retry"     // transient failure; NAKed with backoff
	OutcomeInfra     Outcome = "infra"     // gave up after MaxDeliver; infra result recorded; terminated
)

// decision is the outcome of one message and what it concerns.
type decision struct {
	outcome Outcome
	id      string
	tenant  string
	queue   string
	delayed bool  // the job starts later (delay.go): its message is not held
	err     error // cause of a retry or infra outcome
}

// handle processes one message and settles it (ack, nak or term), or
// holds it when its job went into the queue (hold.go). The message came
// with a slot of h, which settling frees and holding keeps. It never
// panics: a panic while processing becomes a retry.
func (s *Scheduler) handle(hard context.Context, msg jetstream.Msg, h *holds) {
	meta, err := msg.Metadata()
	if err != nil {
		h.release()
		s.log.ErrorContext(hard, "message without JetStream metadata; ignored", "subject", msg.Subject(), "err", err)
		return
	}
	ctx := s.propagator().Extract(hard, telemetry.NATSHeaderCarrier(msg.Headers()))
	ctx, span := s.cfg.Tracer.Start(ctx, "paddock.schedule",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.String("messaging.consumer.group.name", s.cfg.Consumer),
			attribute.Int64("messaging.nats.stream.sequence", int64(meta.Sequence.Stream)),
			attribute.Int64("messaging.nats.delivery.count", int64(meta.NumDelivered)),
		))
	defer span.End()

	pctx, cancel := context.WithTimeout(ctx, s.cfg.AckWait/2)
	d := s.safeProcess(pctx, msg, meta)
	cancel()

	span.SetAttributes(
		attribute.String(job.AttrJobID, d.id),
		attribute.String(job.AttrTenant, d.tenant),
		attribute.String(job.AttrQueue, d.queue),
		attribute.String(job.AttrOutcome, string(d.outcome)))
	if d.outcome != OutcomeRetry {
		out := string(d.outcome)
		if d.outcome == OutcomeEnqueued {
			out = telemetry.SubmissionAccepted
		}
		s.cfg.Metrics.Submission(ctx, d.tenant, out)
	}
	if d.err != nil {
		span.RecordError(d.err)
		span.SetStatus(codes.Error, d.err.Error())
	}
	if d.outcome == OutcomeEnqueued && !d.delayed {
		h.add(job.Key(d.tenant, d.id), d.queue, msg) // acknowledged with the result
		return
	}
	s.settle(ctx, hard, msg, meta, d)
	h.release()
}

// settle acknowledges the message as d says.
func (s *Scheduler) settle(ctx, hard context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, d decision) {
	var err error
	switch d.outcome {
	case OutcomeRetry:
		if hard.Err() != nil {
			err = msg.Nak() // shutting down: let another scheduler take it now
			break
		}
		delay := retrydelay.Nth(meta.NumDelivered, s.cfg.BackoffMin, s.cfg.BackoffMax, 0.2)
		s.warnf("scheduler: job not scheduled; will retry", "job", d.id, "delivery", meta.NumDelivered, "retry_in", delay, "err", d.err)
		err = msg.NakWithDelay(delay)
	case OutcomeInfra:
		s.log.ErrorContext(ctx, "scheduler: gave up on a job; infra result recorded", "job", d.id, "deliveries", meta.NumDelivered, "err", d.err)
		err = msg.TermWithReason("paddock: infra result recorded after " + strconv.FormatUint(meta.NumDelivered, 10) + " deliveries")
	default:
		// Acks are the final write of the message's work: they run even
		// when the shutdown deadline passed.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = msg.DoubleAck(actx)
		cancel()
		s.log.DebugContext(ctx, "scheduled", "job", d.id, "queue", d.queue, "outcome", d.outcome, "seq", meta.Sequence.Stream)
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		// Not fatal: an unacked message is redelivered after AckWait and
		// found to be a duplicate.
		s.warnf("scheduler: settling a message failed; it will be redelivered", "job", d.id, "outcome", d.outcome, "err", err)
	}
}

func (s *Scheduler) safeProcess(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata) (d decision) {
	defer func() {
		if p := recover(); p != nil {
			d = decision{outcome: OutcomeRetry, id: d.id, err: fmt.Errorf("scheduler: panic: %v", p)}
		}
	}()
	return s.process(ctx, msg, meta)
}

// process decides what to do with one submission. Every path that returns
// an ack-worthy outcome has first made its effect durable in Redis.
func (s *Scheduler) process(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata) decision {
	// owner names this JetStream message across redeliveries (and across a
	// re-created stream, whose sequences restart).
	owner := fmt.Sprintf("%s/%d@%d", meta.Stream, meta.Sequence.Stream, meta.Timestamp.UnixNano())
	tenant, ok := job.TenantFromSubmitSubject(msg.Subject())
	if !ok {
		// The tenants' streams take only their own subjects; this is a
		// stream an operator changed by hand.
		return decision{outcome: OutcomeInfra, err: fmt.Errorf("scheduler: submission on %q, which names no tenant", msg.Subject())}
	}

	spec, eff, after, err := s.validate(msg, meta, tenant)
	if err != nil {
		spec.Tenant = tenant
		return s.reject(ctx, msg, meta, owner, spec, err)
	}
	d := decision{id: spec.ID, tenant: tenant, queue: spec.Queue, delayed: after.After(s.cfg.Now())}

	key := spec.Key()
	if _, err := s.results.Get(ctx, key); err == nil {
		return d.with(OutcomeDuplicate)
	} else if !errors.Is(err, results.ErrNotFound) {
		return d.retry(err)
	}
	holder, ok, err := s.claims.Claim(ctx, key, owner)
	if err != nil {
		return d.retry(err)
	}
	if !ok {
		s.log.InfoContext(ctx, "duplicate job id: another submission holds it; this one is dropped",
			"job", spec.ID, "tenant", tenant, "holder", holder, "seq", meta.Sequence.Stream)
		return d.with(OutcomeDuplicate)
	}
	if over, err := s.overRate(ctx, tenant); err != nil {
		return d.retry(err)
	} else if over != nil {
		return s.reject(ctx, msg, meta, owner, spec, over)
	}
	if bad, err := s.checkStores(ctx, spec); err != nil {
		return d.retry(err)
	} else if bad != nil {
		return s.reject(ctx, msg, meta, owner, spec, bad)
	}
	canceled, err := s.flags.Canceled(ctx, key)
	if err != nil {
		return d.retry(err)
	}
	if canceled {
		r := s.result(spec)
		r.Error = "canceled before it was scheduled"
		r.Finish(job.ReasonCanceled)
		if _, _, err := s.results.Record(ctx, r); err != nil {
			return d.retry(err)
		}
		return d.with(OutcomeCanceled)
	}

	err = s.enqueue(ctx, spec, eff, after)
	switch {
	case err == nil:
		return d.with(OutcomeEnqueued)
	case errors.Is(err, asynq.ErrTaskIDConflict), errors.Is(err, asynq.ErrDuplicateTask):
		// Enqueued by an earlier delivery (a scheduler that died holding
		// it): the job is in the queue, so hold it as if enqueued now.
		return d.with(OutcomeEnqueued)
	case s.cfg.MaxDeliver > 0 && meta.NumDelivered >= uint64(s.cfg.MaxDeliver):
		r := s.result(spec)
		r.Error = fmt.Sprintf("the scheduler could not enqueue the job after %d deliveries (last error: %v); check Redis and the scheduler logs, then submit the job again with a new id",
			meta.NumDelivered, err)
		r.Finish(job.ReasonInfra)
		if _, _, rerr := s.results.Record(ctx, r); rerr != nil {
			// Recording needs Redis too: keep the message until it answers.
			return d.retry(errors.Join(err, rerr))
		}
		d.err = err
		return d.with(OutcomeInfra)
	default:
		return d.retry(err)
	}
}

// validate decodes the submission of tenant, checks it against the caps and
// fills the defaults (an id, the submit time); after is when a delayed job
// may start (delay.go).
func (s *Scheduler) validate(msg jetstream.Msg, meta *jetstream.MsgMetadata, tenant string) (spec job.Spec, eff job.Effective, after time.Time, err error) {
	if spec, err = job.Decode(msg.Data()); err != nil {
		return spec, eff, after, err
	}
	if err = checkTenant(&spec, tenant); err != nil {
		return spec, eff, after, err
	}
	if eff, err = job.Validate(&spec, s.cfg.Caps); err != nil {
		return spec, eff, after, err
	}
	if err = s.checkGrants(&spec); err != nil {
		return spec, eff, after, err
	}
	if after, err = notBefore(msg.Headers()); err != nil {
		return spec, eff, after, err
	}
	job.Normalize(&spec, s.cfg.Caps)
	if spec.ID == "" {
		spec.ID = fallbackID("j", msg.Headers(), meta)
	}
	if spec.SubmittedAt.IsZero() {
		spec.SubmittedAt = meta.Timestamp.UTC()
	}
	return spec, eff, after, nil
}

func (d decision) with(o Outcome) decision { d.outcome = o; return d }

func (d decision) retry(err error) decision {
	d.outcome, d.err = OutcomeRetry, err
	return d
}

// enqueue puts the task in Redis, carrying the trace context in its headers.
func (s *Scheduler) enqueue(ctx context.Context, spec job.Spec, eff job.Effective, notBefore time.Time) error {
	payload, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	headers := make(map[string]string, 3)
	s.propagator().Inject(ctx, propagation.MapCarrier(headers))
	delayOpts, queuedAt := s.delay(notBefore)
	headers[job.TaskHeaderQueuedAt] = queuedAt.UTC().Format(time.RFC3339Nano)
	task := asynq.NewTaskWithHeaders(job.TaskType, payload, headers)
	_, err = s.enq.EnqueueContext(ctx, task, append([]asynq.Option{
		asynq.TaskID(spec.Key()),
		asynq.Queue(spec.Queue),
		asynq.MaxRetry(s.cfg.MaxRetry),
		asynq.Timeout(eff.JobTimeout + TaskTimeoutMargin),
		asynq.Retention(s.cfg.TaskRetention)}, delayOpts...)...)
	if err == nil {
		if len(delayOpts) == 0 {
			s.wake(spec.Queue)
		}
		s.indexQueued(ctx, spec, queuedAt) // list.go: the job list shows it queued
	}
	return err
}

// wake tells idle workers that queue has a job (job.WakeSubject; the
// worker's wake.go). Fire and forget: a lost wake-up is found by the
// workers' idle poll.
func (s *Scheduler) wake(queue string) {
	if s.cfg.NoWakeups {
		return
	}
	if nc := s.js.Conn(); nc != nil {
		_ = nc.Publish(job.WakeSubject(queue), nil)
	}
}

// reject records the `rejected` result of an invalid submission.
func (s *Scheduler) reject(ctx context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata, owner string, spec job.Spec, verr error) decision {
	id := rejectID(spec, msg.Data(), msg.Headers(), meta)
	d := decision{id: id, tenant: spec.Tenant}
	// The claim keeps an invalid resubmission of a live job's id from
	// recording `rejected` as that job's result.
	holder, ok, err := s.claims.Claim(ctx, job.Key(spec.Tenant, id), owner)
	if err != nil {
		return d.retry(err)
	}
	if !ok {
		s.log.InfoContext(ctx, "invalid resubmission of a job id held by another submission; dropped",
			"job", id, "holder", holder, "err", verr)
		return d.with(OutcomeDuplicate)
	}
	fields := job.FieldErrors(verr)
	r := job.Result{
		ID:          id,
		Tenant:      spec.Tenant,
		Errors:      fields,
		Error:       summary(fields),
		SubmittedAt: spec.SubmittedAt,
		FinishedAt:  s.cfg.Now().UTC(),
	}
	if r.SubmittedAt.IsZero() {
		r.SubmittedAt = meta.Timestamp.UTC()
	}
	r.Finish(job.ReasonRejected)
	// Record also when only the publish failed: the retry republishes.
	if _, _, err := s.results.Record(ctx, r); err != nil {
		return d.retry(err)
	}
	s.log.InfoContext(ctx, "job rejected", "job", id, "err", r.Error)
	return d.with(OutcomeRejected)
}

// result starts the terminal result of a valid spec that never ran.
func (s *Scheduler) result(spec job.Spec) job.Result {
	return job.Result{
		ID:          spec.ID,
		Tenant:      spec.Tenant,
		SubmittedAt: spec.SubmittedAt,
		FinishedAt:  s.cfg.Now().UTC(),
		Image:       spec.Image,
		Queue:       spec.Queue,
		Labels:      spec.Labels,
	}
}

// summary is a one-line description of a rejection.
func summary(fields []job.FieldError) string {
	const show = 3
	parts := make([]string, 0, show)
	for i, f := range fields {
		if i == show {
			break
		}
		parts = append(parts, f.Error())
	}
	msg := "job rejected: " + strings.Join(parts, "; ")
	if len(fields) > show {
		msg += fmt.Sprintf(" (and %d more)", len(fields)-show)
	}
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	return msg + "; fix the spec and submit it again"
}

// rejectID names a rejected submission: its own id when valid (also when
// the document failed strict decoding but still carries one), else its
// Nats-Msg-Id, else one derived from the message.
func rejectID(spec job.Spec, data []byte, hdr nats.Header, meta *jetstream.MsgMetadata) string {
	if job.ValidID(spec.ID) {
		return spec.ID
	}
	if spec.ID == "" {
		// Lenient: the first JSON value, unknown fields and wrong types
		// elsewhere ignored.
		var loose struct {
			ID string `json:"id"`
		}
		_ = json.NewDecoder(bytes.NewReader(data)).Decode(&loose)
		if job.ValidID(loose.ID) {
			return loose.ID
		}
	}
	return fallbackID("rej", hdr, meta)
}

// fallbackID is the Nats-Msg-Id when it is a valid job id, else an id
// derived from the stream sequence and storage time, identical on every
// redelivery and distinct across a re-created stream.
func fallbackID(prefix string, hdr nats.Header, meta *jetstream.MsgMetadata) string {
	if id := hdr.Get(job.HeaderMsgID); job.ValidID(id) {
		return id
	}
	return prefix + "-" + strconv.FormatUint(meta.Sequence.Stream, 10) + "-" + strconv.FormatInt(meta.Timestamp.UnixNano(), 36)
}

func (s *Scheduler) propagator() propagation.TextMapPropagator {
	if s.cfg.Propagator != nil {
		return s.cfg.Propagator
	}
	return telemetry.Propagator() // the wire format is W3C whatever the globals are
}

// warnf logs a warning unless one was logged within the last 5 s; the
// next one that is logged says how many were left out.
func (s *Scheduler) warnf(msg string, args ...any) {
	if !s.warn.Allow() {
		s.suppressed.Add(1)
		return
	}
	if suppressed := s.suppressed.Swap(0); suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	s.log.Warn(msg, args...)
}
