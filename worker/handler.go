package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/telemetry"
)

// jobRun is what the steps of one ProcessTask call share.
type jobRun struct {
	key     string // job.Key: the job's name in Redis
	task    string // the asynq task id: key, or a rescue task's (internal/asynqx.RescueID)
	log     *slog.Logger
	spec    job.Spec
	eff     job.Effective
	res     job.Result // the result so far; finish (result.go) ends it
	profile sandbox.Profile
	env     map[string]string
	io      *runIO // the run's agent I/O, once a container was taken
	sess    *sandbox.Session
	vol     *volumeRun // the job's volume, when it has one (quota.go)
}

// deadline is the end of the job's budget (limits.job_timeout_s).
func (r *jobRun) deadline() time.Time { return r.res.StartedAt.Add(r.eff.JobTimeout) }

// ResultStore is the part of *results.Store that keeps a job's terminal
// result: Record (first writer wins), RecordRun (the same, fenced by the
// run's token: results.ErrStaleRun once the run was superseded) and Get
// (results.ErrNotFound when there is none).
type ResultStore interface {
	Record(ctx context.Context, r job.Result) (job.Result, bool, error)
	RecordRun(ctx context.Context, r job.Result, tok results.RunToken) (job.Result, bool, error)
	Get(ctx context.Context, key string) (job.Result, error)
}

// RunStore is the part of *results.Store that counts a job's runs and
// notes them in this worker's active set, which a rescuer of a live
// worker reads once this one's heartbeat is gone.
type RunStore interface {
	BeginRunAs(ctx context.Context, key string, o results.RunOwner) (int, error)
	EndRun(ctx context.Context, worker, key string, run int) error
}

// ProcessTask is the asynq handler of job.TaskType. It returns in one of
// four ways: with the job's terminal result recorded (finish, result.go);
// with a retryable infrastructure failure for the queue to retry
// (infraFail); with an interruption handed back to the queue (requeue); or
// with an error reading or writing the store, which the queue retries.
func (w *Worker) ProcessTask(ctx context.Context, t *asynq.Task) error {
	started := w.cfg.Now()
	taskID, _ := asynq.GetTaskID(ctx)
	key := jobKey(taskID) // job.Key: tenant/id (a rescue task's id carries a suffix: fence.go)
	tenant, id, _ := job.SplitKey(key)
	r := &jobRun{key: key, task: taskID, log: w.log.With("job", id, "tenant", tenant)}
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrJobID.String(id), attribute.String(job.AttrTenant, tenant))

	spec, eff, err := w.decode(t, key)
	if err != nil {
		r.res = job.Result{ID: id, Tenant: tenant, Errors: job.FieldErrors(err)}
		return w.finish(ctx, r, job.ReasonRejected, "rejected by the worker: "+err.Error())
	}
	if ended, err := w.republish(ctx, key); ended || err != nil {
		return err
	}
	r.spec, r.eff, r.env = spec, eff, jobEnv(spec, id)
	r.profile = sandbox.Profile{Image: spec.Image, MemoryMB: eff.MemoryMB, CPUs: eff.CPUs, Pids: eff.Pids, TmpfsMB: eff.TmpfsMB}
	r.res = job.Result{
		ID: id, Tenant: spec.Tenant, Image: spec.Image, Queue: spec.Queue, Labels: spec.Labels, Limits: &r.eff,
		SubmittedAt: spec.SubmittedAt, QueuedAt: queuedAt(t), StartedAt: started, Worker: w.cfg.ID,
	}
	if canceled, err := w.flags.Canceled(ctx, key); err != nil {
		return fmt.Errorf("worker: read cancel flag of %s: %w", key, err)
	} else if canceled {
		return w.finish(ctx, r, job.ReasonCanceled, "canceled before it started")
	}
	if err := w.beginRun(ctx, r); errors.Is(err, results.ErrStaleTask) {
		r.log.InfoContext(ctx, "a rescue task carries this job now; this delivery completes without running", "task", taskID)
		return nil
	} else if err != nil {
		return err
	}
	defer w.endRun(ctx, key, r.res.Runs)
	return w.withVolume(ctx, r, w.runJob) // volume.go
}

// decode reads the task's spec and validates it again against this
// worker's caps: nothing taken from the queue is trusted.
func (w *Worker) decode(t *asynq.Task, key string) (job.Spec, job.Effective, error) {
	spec, err := job.Decode(t.Payload())
	if err != nil {
		return spec, job.Effective{}, err
	}
	if spec.Key() != key {
		return spec, job.Effective{}, fmt.Errorf("%w: payload %q differs from task id %q", job.ErrInvalid, spec.Key(), key)
	}
	eff, err := job.Validate(&spec, w.cfg.Caps)
	if err != nil {
		return spec, eff, err
	}
	job.Normalize(&spec, w.cfg.Caps)
	return spec, eff, nil
}

// republish handles a job that already ended (re-delivery after a crash, a
// duplicate): it is not run again, and its result is published again in
// case the crash came between the Redis write and the publish. ended says
// whether the job had a result; an error (results.ErrNotPublished among
// them) makes the queue retry.
func (w *Worker) republish(ctx context.Context, key string) (ended bool, err error) {
	prev, err := w.store.Get(ctx, key)
	if errors.Is(err, results.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("worker: read result of %s: %w", key, err)
	}
	dctx, cancel := detached(ctx)
	defer cancel()
	_, _, err = w.store.Record(dctx, prev)
	return true, err
}

// beginRun counts this run of the job (in this worker's active set, for a
// rescuer: internal/asynqx) and records its queue wait. It wraps
// results.ErrStaleTask when the task no longer carries the job.
func (w *Worker) beginRun(ctx context.Context, r *jobRun) error {
	run, err := w.runs.BeginRunAs(ctx, r.key, results.RunOwner{Worker: w.cfg.ID, TaskID: r.task, Queue: r.spec.Queue})
	if err != nil {
		return fmt.Errorf("worker: begin run of %s: %w", r.key, err)
	}
	r.res.Runs = run
	if !r.res.QueuedAt.IsZero() {
		w.m.QueueWait(ctx, r.spec.Queue, r.res.StartedAt.Sub(r.res.QueuedAt))
	}
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrQueue.String(r.spec.Queue), attribute.Int(job.AttrRun, run))
	return nil
}

// runJob takes a never-used container, runs the command in it under the
// heal loop and ends the job by how the loop returned. The container is
// always destroyed.
func (w *Worker) runJob(ctx context.Context, r *jobRun) error {
	if why := w.noBroker(r); why != "" {
		return w.finish(ctx, r, job.ReasonInfra, why)
	}
	if w.cfg.NoopExecutor {
		return w.runNoop(ctx, r) // noop.go
	}
	sess, err := w.session(ctx, r)
	if err != nil {
		return w.infraFail(ctx, r, err)
	}
	r.sess = sess
	stopBroker := w.serveBroker(ctx, r, sess)
	defer stopBroker()
	r.io = w.newRunIO(r)
	defer r.io.end("") // no end marker unless finish gave one
	if r.spec.Volume != nil {
		// Deferred calls run last-in first-out: this runs before withVolume
		// releases the volume.
		defer func() {
			dctx, cancel := detached(ctx)
			defer cancel()
			if err := sess.Destroy(dctx); err != nil {
				r.log.ErrorContext(ctx, "could not confirm the container is gone before releasing the volume", "err", err)
			}
		}()
	} else {
		defer sess.Close()
	}
	if err := w.traced(ctx, "paddock.files.place", len(r.spec.Files) > 0, func(ctx context.Context) error {
		return w.placeFiles(ctx, r, sess)
	}); err != nil {
		stopBroker()
		return w.filesFailed(ctx, r, sess, err)
	}
	hres, err := w.heal(ctx, r, sess)
	r.res.Attempts = hres.Attempts
	if err == nil {
		if cerr := w.traced(ctx, "paddock.artifacts.collect", len(r.spec.Artifacts) > 0, func(ctx context.Context) error {
			return w.collectArtifacts(ctx, r, sess)
		}); cerr != nil {
			r.log.WarnContext(ctx, "artifacts not collected", "err", cerr)
			r.res.Refused = append(r.res.Refused, job.Refusal{Path: strings.Join(r.spec.Artifacts, " "), Reason: "not collected: " + cerr.Error()})
		}
	}
	stopBroker()
	return w.conclude(ctx, r, sess, hres, err)
}

// session takes a container for the job from the sandbox runtime.
func (w *Worker) session(ctx context.Context, r *jobRun) (*sandbox.Session, error) {
	if tp := telemetry.TraceParent(ctx); tp != "" {
		r.env["TRACEPARENT"] = tp
	}
	actx, aspan := w.tr.Start(ctx, "paddock.sandbox.acquire", trace.WithAttributes(attribute.String("container.image.name", r.spec.Image)))
	sess, err := w.rt.Acquire(actx, r.profile, sandbox.SessionOptions{
		Deadline: r.deadline(),
		Labels:   map[string]string{sandbox.LabelJob: r.key, sandbox.LabelAttempt: strconv.Itoa(r.res.Runs)},
		Env:      r.env,
	})
	if err == nil {
		// Before the span ends: attributes set on an ended span are lost.
		aspan.SetAttributes(attribute.Bool(job.AttrPoolHit, sess.Pooled), attribute.String("container.name", sess.ContainerName()))
	}
	endSpan(aspan, err)
	if err != nil {
		return nil, err
	}
	if sess.Pooled {
		w.m.PoolHit(ctx)
	} else {
		w.m.PoolColdStart(ctx)
	}
	r.log.DebugContext(ctx, "session", "container", sess.ContainerName(), "pooled", sess.Pooled)
	return sess, nil
}

// heal runs the job's command in sess under the heal loop.
func (w *Worker) heal(ctx context.Context, r *jobRun, sess *sandbox.Session) (healer.Result, error) {
	eff := r.eff
	trace.SpanFromContext(ctx).SetAttributes(
		attribute.Int64(job.AttrLimitMemoryMB, eff.MemoryMB), attribute.Float64(job.AttrLimitCPUs, eff.CPUs),
		attribute.Int64(job.AttrLimitPids, eff.Pids), attribute.Int64(job.AttrLimitCommandTimeout, int64(eff.CommandTimeout/time.Second)))
	var policy job.HealPolicy
	if r.spec.Heal != nil {
		policy = *r.spec.Heal
	}
	// The job budget: the healer fits its commands, installs and LLM calls
	// into it, so the sandbox (not this context) ends a command at the deadline.
	hctx, cancel := context.WithDeadline(ctx, r.deadline())
	defer cancel()
	ex := &sessionExec{sess: sess, dir: r.spec.Workdir, outputBytes: eff.OutputBytes, io: r.io, ctx: ctx}
	if r.spec.Output != nil && r.spec.Output.Spill && r.vol != nil {
		// The spill may take the room the quota leaves, not more.
		ex.spill, ex.res = r.res.ID, &r.res
		if r.vol.maxBytes > 0 {
			if ex.spillMax = r.vol.limit - r.vol.start; ex.spillMax <= 0 {
				ex.spillMax = -1 // no room: nothing is spilled
			}
		}
	}
	return w.cfg.Healer.Run(hctx, ex,
		r.spec, policy, eff.CommandTimeout)
}

// conclude ends the job by how the heal loop returned (err): the command
// ended, the volume's lease was lost, the job was interrupted, or the
// sandbox failed.
func (w *Worker) conclude(ctx context.Context, r *jobRun, sess *sandbox.Session, hres healer.Result, err error) error {
	if w.fenced(ctx) {
		// The heartbeat may have expired meanwhile and the job been rescued
		// elsewhere: this run records nothing (fence.go).
		return w.interrupted(ctx, r, sess)
	}
	out, _ := hres.Final.Detail.(sandbox.Outcome)
	jobDeadline := err != nil && ctx.Err() == nil &&
		(errors.Is(err, sandbox.ErrSessionBroken) && out.Reason == sandbox.ReasonTimeout || errors.Is(err, context.DeadlineExceeded))
	// The job's own processes ended its sandbox (init killed under a limit
	// the job hit): the job's failure, with the outcome's reason, once.
	jobEnded := err != nil && ctx.Err() == nil && errors.Is(err, sandbox.ErrSandboxEnded)
	switch {
	case err == nil, jobDeadline, jobEnded:
		// The command ended (a job-deadline kill is the job's timeout).
		return w.commandEnded(ctx, r, hres, out, jobDeadline)
	case errors.Is(context.Cause(ctx), errVolumeQuota):
		return w.quotaKilled(ctx, r)
	case errors.Is(context.Cause(ctx), errLeaseLost):
		markLast(&r.res, job.ReasonLeaseLost)
		return w.finish(ctx, r, job.ReasonLeaseLost, "the volume's lease was lost while the job ran (Redis unreachable or the lease taken over); its container was killed so it cannot write stale data")
	case ctx.Err() != nil:
		return w.interrupted(ctx, r, sess)
	default:
		return w.infraFail(ctx, r, err)
	}
}

// quotaKilled ends a job killed because its volume went past its quota.
func (w *Worker) quotaKilled(ctx context.Context, r *jobRun) error {
	markLast(&r.res, job.ReasonFsize)
	msg := fmt.Sprintf("the workspace grew past its quota of %d bytes and the job was killed; remove files from /workspace (a job may still shrink a workspace over its quota) or write less", r.vol.limit)
	if r.vol.unmeasured {
		msg = fmt.Sprintf("the workspace cannot be measured whole (nested over 256 deep, over %d entries, or a directory the worker cannot enter), so the job was held to the disk holding it, and killed when the disk lost more than the quota of %d bytes while it ran; remove the deep or unreadable part (rm -rf) in a job that writes nothing else", maxVolumeEntries, r.vol.maxBytes)
	}
	return w.finish(ctx, r, job.ReasonFsize, msg)
}

// interrupted ends a job whose context ended: canceled by the user, or the
// worker is shutting down / lost the task's lease. It confirms the
// container is gone before returning, so that a re-run never overlaps this
// one.
func (w *Worker) interrupted(ctx context.Context, r *jobRun, sess *sandbox.Session) error {
	dctx, cancel := detached(ctx)
	defer cancel()
	if err := sess.Destroy(dctx); err != nil {
		r.log.ErrorContext(ctx, "could not confirm the interrupted job's container is gone", "err", err)
	}
	if w.fenced(ctx) {
		r.log.WarnContext(ctx, "job killed by the heartbeat fence; its rescue or the queue runs it again")
		return fmt.Errorf("worker: job %s interrupted: %w", r.key, errFenced)
	}
	if w.canceledAfter(ctx, dctx, r) {
		markLast(&r.res, job.ReasonCanceled)
		return w.finish(ctx, r, job.ReasonCanceled, "canceled while running; its container was killed")
	}
	r.log.WarnContext(ctx, "job interrupted; the queue will run it again", "cause", context.Cause(ctx))
	return requeue(ctx, r.key)
}

// canceledAfter tells whether an interrupted job was canceled: its cancel
// watcher saw the flag, or the flag is set (read up to 3 times: a failed
// read must not turn a cancel into a re-run).
func (w *Worker) canceledAfter(ctx, dctx context.Context, r *jobRun) bool {
	if errors.Is(context.Cause(ctx), errCanceled) {
		return true
	}
	var err error
	for range 3 {
		var c bool
		if c, err = w.flags.Canceled(dctx, r.key); err == nil {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.log.WarnContext(ctx, "could not read the interrupted job's cancel flag; the queue will run it again, and that run sees the flag", "err", err)
	return false
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// jobEnv is the job's own env plus what Paddock tells it; nothing of the
// worker's environment.
func jobEnv(spec job.Spec, id string) map[string]string {
	env := make(map[string]string, len(spec.Env)+1)
	for k, v := range spec.Env {
		env[k] = v
	}
	env["PADDOCK_JOB_ID"] = id
	return env
}

func queuedAt(t *asynq.Task) time.Time {
	ts, err := time.Parse(time.RFC3339Nano, t.Headers()[job.TaskHeaderQueuedAt])
	if err != nil {
		return time.Time{}
	}
	return ts
}
