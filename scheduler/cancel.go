package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// TaskInspector is the part of *asynq.Inspector the Canceler uses.
type TaskInspector interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
	CancelProcessing(id string) error
}

// CancelStore is the part of *results.Store the Canceler uses: the
// terminal result, the cancel flag it sets, and the task carrying the job
// (TaskOf: the job key, or the rescue task a rescuer moved it to).
type CancelStore interface {
	ResultStore
	Cancel(ctx context.Context, key string) error
	TaskOf(ctx context.Context, key string) (string, error)
}

// CancelerConfig configures a Canceler. A zero field takes its default.
type CancelerConfig struct {
	// Queues are the asynq queues a job may be in. Default: the default
	// caps' queues; pass the operator's (Caps.Queues).
	Queues []string
	// Timeout bounds the handling of one request. Default 10s.
	Timeout time.Duration
	// Logger, default slog.Default(); logs with component=canceler.
	Logger *slog.Logger
	// Now, default time.Now.
	Now func() time.Time
}

// Canceler answers cancel requests (job.SubjectCancelRequests, queue group
// job.QueueCancelers): it sets the job's cancel flag, removes a job still
// waiting in the queue and records its `canceled` result, or asks the worker
// running it to stop (asynq CancelProcessing; the worker also polls the
// flag), whose handler then kills the container and records `canceled`.
//
// The flag comes first, so every later reader of the job (the scheduler
// before enqueueing, a worker before running, a worker polling while it
// runs) sees it: whatever the race with a dequeue, the job ends `canceled`
// unless it had already finished. It is a restartable service.
type Canceler struct {
	nc    *nats.Conn
	insp  TaskInspector
	store CancelStore
	cfg   CancelerConfig
	log   *slog.Logger

	mu  sync.Mutex
	sub *nats.Subscription
}

// NewCanceler returns a stopped Canceler.
func NewCanceler(nc *nats.Conn, insp TaskInspector, store CancelStore, cfg CancelerConfig) (*Canceler, error) {
	if nc == nil || insp == nil || store == nil {
		return nil, fmt.Errorf("%w: nil NATS connection, TaskInspector or CancelStore", ErrConfig)
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = job.Caps{}.WithDefaults().Queues
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative cancel Timeout %s", ErrConfig, cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Canceler{nc: nc, insp: insp, store: store, cfg: cfg, log: cfg.Logger.With("component", "canceler")}, nil
}

// Start subscribes to cancel requests. Idempotent.
func (c *Canceler) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sub != nil {
		return nil
	}
	// One request at a time per scheduler (the subscription's callbacks are
	// serial): each takes a few Redis round trips, and the queue group
	// spreads requests over the schedulers.
	sub, err := c.nc.QueueSubscribe(job.SubjectCancelRequests, job.QueueCancelers, func(m *nats.Msg) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
		defer cancel()
		reply := c.handle(rctx, m.Subject, m.Data)
		data, _ := json.Marshal(reply)
		if err := m.Respond(data); err != nil {
			c.log.WarnContext(ctx, "cancel reply not sent", "job", reply.ID, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("scheduler: subscribe %s: %w", job.SubjectCancelRequests, err)
	}
	if err := c.nc.FlushTimeout(5 * time.Second); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("scheduler: subscribe %s: %w", job.SubjectCancelRequests, err)
	}
	c.sub = sub
	return nil
}

// Stop stops taking requests and lets the one in progress finish (at most
// the request Timeout). Idempotent; Start may follow.
func (c *Canceler) Stop() {
	c.mu.Lock()
	sub := c.sub
	c.sub = nil
	c.mu.Unlock()
	if sub == nil {
		return
	}
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
		return
	}
	deadline := time.Now().Add(c.cfg.Timeout)
	for sub.IsValid() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// handle answers one request. The tenant is the subject's, which only that
// tenant may publish to: a tenant can cancel only its own jobs.
func (c *Canceler) handle(ctx context.Context, subject string, data []byte) job.CancelReply {
	tenant, ok := job.TenantFromCancelSubject(subject)
	if !ok {
		return job.CancelReply{Error: "cancel request on " + subject + ", which names no tenant"}
	}
	var req job.CancelRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return job.CancelReply{Error: "malformed cancel request: " + err.Error()}
	}
	reply, err := c.Cancel(ctx, tenant, req.ID)
	if err != nil {
		reply = job.CancelReply{ID: req.ID, Error: err.Error()}
		c.log.WarnContext(ctx, "cancel failed", "job", req.ID, "err", err)
	} else {
		c.log.InfoContext(ctx, "cancel", "job", req.ID, "outcome", reply.Outcome)
	}
	return reply
}

// Cancel cancels tenant's job id as described on Canceler and says what it did. An
// error means nothing may have changed except the flag: retrying is safe.
func (c *Canceler) Cancel(ctx context.Context, tenant, id string) (job.CancelReply, error) {
	if !job.ValidID(id) {
		return job.CancelReply{}, fmt.Errorf("%w: id %q must match [A-Za-z0-9._-]{1,128}", job.ErrInvalid, id)
	}
	key := job.Key(tenant, id)
	if r, err := c.store.Get(ctx, key); err == nil {
		return finished(r), nil
	} else if !errors.Is(err, results.ErrNotFound) {
		return job.CancelReply{}, err
	}
	if err := c.store.Cancel(ctx, key); err != nil {
		return job.CancelReply{}, err
	}
	// A task may change state under us (a worker dequeues it between the
	// look-up and the delete, a rescuer moves the job to a rescue task):
	// look again, a few times.
	for range 3 {
		reply, done, err := c.cancelTask(ctx, tenant, id)
		if done || err != nil {
			return reply, err
		}
	}
	return job.CancelReply{ID: id, Outcome: job.CancelFlagged,
		Message: "the job keeps changing state; the cancel flag is set, so it ends canceled when a worker next reads it"}, nil
}

// cancelTask acts on the task that carries the job now (the job key, or a
// rescue task <key>#rescue-<run> after its worker died: the original task
// is then stale, and removing it would cancel nothing). done is false when
// the task moved on meanwhile: look again.
func (c *Canceler) cancelTask(ctx context.Context, tenant, id string) (reply job.CancelReply, done bool, err error) {
	key := job.Key(tenant, id)
	task, err := c.store.TaskOf(ctx, key)
	if err != nil {
		return job.CancelReply{}, true, err
	}
	q, info, err := c.find(task)
	if err != nil {
		return job.CancelReply{}, true, err
	}
	if info == nil {
		// Not in any queue: still in JetStream (the scheduler sees the
		// flag before enqueueing), just finished, a rescue not enqueued
		// yet, or unknown.
		if r, err := c.store.Get(ctx, key); err == nil {
			return finished(r), true, nil
		}
		return job.CancelReply{ID: id, Outcome: job.CancelFlagged,
			Message: "not in the queue yet (or unknown id): the cancel flag is set, so the job ends canceled when a scheduler or worker reaches it"}, true, nil
	}
	switch info.State {
	case asynq.TaskStateActive:
		if err := c.insp.CancelProcessing(task); err != nil {
			// The worker's own poll of the flag still stops it.
			c.log.WarnContext(ctx, "cancel: notifying the workers failed; the worker's flag poll will stop the job", "job", id, "err", err)
		}
		return job.CancelReply{ID: id, Outcome: job.CancelKilling,
			Message: "running: its worker kills the container and records the result canceled"}, true, nil
	case asynq.TaskStateCompleted:
		if r, err := c.store.Get(ctx, key); err == nil {
			return finished(r), true, nil
		}
		// Completed without a result cannot happen; record one.
		reply, err := c.recordCanceled(ctx, tenant, id, info, "canceled after its task completed without a result")
		return reply, true, err
	case asynq.TaskStateArchived:
		// Dead (retries used up) without a result: this is its end.
		reply, err := c.recordCanceled(ctx, tenant, id, info, "canceled; the job had failed all its queue retries")
		return reply, true, err
	}
	// pending, scheduled, retry, aggregating
	err = c.insp.DeleteTask(q, task)
	switch {
	case err == nil:
		msg := "canceled while " + stateName(info.State) + " in the queue; it never ran"
		if task != key {
			msg = "canceled while its rescue (" + task + ") was " + stateName(info.State) + " in the queue; its earlier run was lost with its worker, and it did not run again"
		}
		reply, err := c.recordCanceled(ctx, tenant, id, info, msg)
		return reply, true, err
	case errors.Is(err, asynq.ErrTaskNotFound), strings.Contains(err.Error(), "active state"):
		return job.CancelReply{}, false, nil // it moved on: look again
	default:
		return job.CancelReply{}, true, fmt.Errorf("scheduler: delete task %s from queue %s: %w", task, q, err)
	}
}

// find returns the queue and task of id, or a nil info when no queue has it.
func (c *Canceler) find(id string) (string, *asynq.TaskInfo, error) {
	for _, q := range c.cfg.Queues {
		info, err := c.insp.GetTaskInfo(q, id)
		switch {
		case err == nil:
			return q, info, nil
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			continue
		default:
			return "", nil, fmt.Errorf("scheduler: look up task %s in queue %s: %w", id, q, err)
		}
	}
	return "", nil, nil
}

// recordCanceled records the canceled result of a job that is not running.
func (c *Canceler) recordCanceled(ctx context.Context, tenant, id string, info *asynq.TaskInfo, msg string) (job.CancelReply, error) {
	r := job.Result{ID: id, Tenant: tenant, Error: msg, FinishedAt: c.cfg.Now().UTC()}
	if spec, err := job.Decode(info.Payload); err == nil {
		r.SubmittedAt, r.Image, r.Queue, r.Labels = spec.SubmittedAt, spec.Image, spec.Queue, spec.Labels
	}
	r.Finish(job.ReasonCanceled)
	stored, _, err := c.store.Record(ctx, r)
	if err != nil && !errors.Is(err, results.ErrNotPublished) {
		return job.CancelReply{}, err
	}
	reply := finished(stored)
	if stored.Reason == job.ReasonCanceled {
		reply.Outcome, reply.Message = job.CancelQueued, stored.Error
	}
	return reply, nil
}

func finished(r job.Result) job.CancelReply {
	return job.CancelReply{ID: r.ID, Outcome: job.CancelFinished, State: r.State, Reason: r.Reason,
		Message: "already finished: " + string(r.State) + " (" + string(r.Reason) + ")"}
}

func stateName(s asynq.TaskState) string {
	switch s {
	case asynq.TaskStateScheduled:
		return "delayed"
	case asynq.TaskStateRetry:
		return "waiting for a retry"
	default:
		return s.String()
	}
}
