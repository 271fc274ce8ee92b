package worker

import (
	"context"
	"errors"
	"fmt"
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

// finish ends the job with reason and msg (its Error) and records the
// result. Every terminal result goes through here.
func (w *Worker) finish(ctx context.Context, r *jobRun, reason job.Reason, msg string) error {
	r.res.Error = msg
	reason = w.settleVolume(ctx, r, reason)
	r.res.FinishedAt = w.cfg.Now()
	r.res.Finish(reason)
	if r.io != nil && r.io.kept != nil {
		r.res.Kept = r.io.kept
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int64(job.AttrKeptBytes, r.io.kept.Stdout.Bytes+r.io.kept.Stderr.Bytes))
	}
	err := w.record(ctx, r)
	if errors.Is(err, results.ErrStaleRun) {
		// Rescued or run again meanwhile (a freeze past the heartbeat's TTL
		// after the fence check): the run that superseded this one records.
		r.log.WarnContext(ctx, "this run was superseded (rescued or run again); its result was not recorded", "err", err)
		return nil
	}
	if err == nil {
		// After the record: a follower that sees the end finds the result.
		r.io.end(reason)
	}
	return err
}

// filesFailed ends a job whose files could not be placed: the job's input
// (rejected, naming the file) or the sandbox (infra).
func (w *Worker) filesFailed(ctx context.Context, r *jobRun, sess *sandbox.Session, err error) error {
	var ve *job.ValidationError
	if errors.As(err, &ve) {
		r.res.Errors = ve.Fields
		return w.finish(ctx, r, job.ReasonRejected, "a file could not be placed in the workspace before the first command: "+ve.Error())
	}
	if errors.Is(context.Cause(ctx), errVolumeQuota) {
		return w.quotaKilled(ctx, r)
	}
	if ctx.Err() != nil {
		return w.interrupted(ctx, r, sess)
	}
	return w.infraFail(ctx, r, err)
}

// commandEnded ends a job whose command ended: with its exit code, its
// output and, for a failure, what happened and what to do about it.
func (w *Worker) commandEnded(ctx context.Context, r *jobRun, hres healer.Result, out sandbox.Outcome, jobDeadline bool) error {
	reason, code := hres.Reason, hres.Final.ExitCode
	if jobDeadline {
		reason, code = job.ReasonTimeout, -1
		markLast(&r.res, job.ReasonTimeout)
	}
	r.res.ExitCode = &code
	r.res.Stdout, r.res.Stderr = toOutput(out.Stdout), toOutput(out.Stderr)
	msg := explain(reason, out, r.eff, jobDeadline)
	if out.Ended != "" {
		msg = out.Ended + "; " + msg
	}
	return w.finish(ctx, r, reason, msg)
}

// explain says what happened to a failed command and what to do about it.
func explain(r job.Reason, out sandbox.Outcome, eff job.Effective, jobDeadline bool) string {
	switch r {
	case job.ReasonTimeout:
		if jobDeadline {
			return fmt.Sprintf("killed at the job timeout of %s (the container was destroyed); raise limits.job_timeout_s or split the work", eff.JobTimeout)
		}
		return fmt.Sprintf("killed after the %s timeout (every process of the command was killed); raise limits.command_timeout_s or make the command finish sooner", eff.CommandTimeout)
	case job.ReasonOOM:
		return fmt.Sprintf("the kernel's OOM killer killed a process (%d kill(s)): the job needed more than its %d MiB memory limit; use less memory or raise limits.memory_mb", out.OOMKills, eff.MemoryMB)
	case job.ReasonPidsLimit:
		return fmt.Sprintf("the job reached its limit of %d processes (a fork was refused) and every process was killed; a fork bomb ends here, a real workload can raise limits.pids", eff.Pids)
	case job.ReasonOutputCap:
		return "the command printed more output than the worker accepts and was killed; write large output to a file under /workspace instead of stdout"
	case job.ReasonFsize:
		return "a file grew past the sandbox's file-size limit (SIGXFSZ); write less, or ask the operator for a larger fsize limit"
	case job.ReasonSignal:
		return fmt.Sprintf("the command was killed by signal %d", out.Signal)
	}
	return ""
}

// infraFail retries a retryable sandbox failure through the queue while
// retries remain; then the job ends as infra with what to do.
func (w *Worker) infraFail(ctx context.Context, r *jobRun, cause error) error {
	retry, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if errors.Is(context.Cause(ctx), errLeaseLost) {
		// Lost while the sandbox was starting: the job never ran, but it
		// must not run again under a lease someone else now holds.
		return w.finish(ctx, r, job.ReasonLeaseLost, "the volume's lease was lost before the job could start (Redis unreachable or the lease taken over); it did not run")
	}
	if errors.Is(context.Cause(ctx), errVolumeQuota) {
		// Another run would find the volume as it is: never a retry.
		return w.quotaKilled(ctx, r)
	}
	if ctx.Err() != nil {
		return requeue(ctx, r.key)
	}
	if sandbox.IsRetryable(cause) && retry < maxRetry {
		r.log.WarnContext(ctx, "infrastructure failure; the queue will retry", "err", cause, "retry", retry, "max_retry", maxRetry)
		return cause
	}
	msg := fmt.Sprintf("%v (after %d of %d tries; this is a failure of the worker's infrastructure, not of the job: check the worker's Docker engine and image)", cause, retry+1, maxRetry+1)
	if err := w.finish(ctx, r, job.ReasonInfra, msg); err != nil {
		return err
	}
	return fmt.Errorf("%v: %w", cause, asynq.SkipRetry)
}

// requeue is the error that hands an interrupted job back to the queue,
// which runs it again.
func requeue(ctx context.Context, id string) error {
	return fmt.Errorf("worker: job %s interrupted: %w", id, context.Cause(ctx))
}

// record writes the terminal result on a detached context: a final write
// must not be lost to the cancellation that ended the job. The result of a
// run (one beginRun counted) is fenced by the run's token: it is stored
// only while the run is still the job's (results.Store.RecordRun), else
// the error wraps results.ErrStaleRun.
func (w *Worker) record(ctx context.Context, r *jobRun) error {
	log, res := r.log, r.res
	dctx, cancel := detached(ctx)
	defer cancel()
	var stored job.Result
	var first bool
	var err error
	if res.Runs > 0 {
		stored, first, err = w.store.RecordRun(dctx, res, results.RunToken{Run: res.Runs, TaskID: r.task})
	} else {
		stored, first, err = w.store.Record(dctx, res)
	}
	if errors.Is(err, results.ErrStaleRun) {
		return err
	}
	if err != nil && !errors.Is(err, results.ErrNotPublished) {
		return fmt.Errorf("worker: record result of %s: %w", res.ID, err)
	}
	if err != nil {
		log.WarnContext(ctx, "result stored but not published; the republisher next to the scheduler publishes it later", "err", err)
	}
	if !first {
		log.InfoContext(ctx, "job already had a result; kept the first", "state", stored.State, "reason", stored.Reason)
	}
	log.DebugContext(ctx, "job finished", "state", stored.State, "reason", stored.Reason)
	if first {
		w.m.JobFinished(dctx, res.Tenant, res.Queue, string(res.State), string(res.Reason))
		if !res.StartedAt.IsZero() && !res.FinishedAt.IsZero() {
			w.m.RunDuration(dctx, res.Queue, string(res.Reason), res.FinishedAt.Sub(res.StartedAt))
		}
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(telemetry.AttrState.String(string(stored.State)), telemetry.AttrReason.String(string(stored.Reason)))
	if stored.State != job.StateSucceeded {
		span.SetAttributes(attribute.String("error.type", string(stored.Reason)))
		span.SetStatus(codes.Error, string(stored.Reason))
	}
	return nil
}

// detached returns a context that outlives ctx's cancellation, with its own
// deadline, for final writes and cleanup.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
}

// markLast sets the reason of the last attempt, the one an interruption
// ended.
func markLast(res *job.Result, r job.Reason) {
	if n := len(res.Attempts); n > 0 {
		res.Attempts[n-1].Reason, res.Attempts[n-1].ExitCode = r, -1
	}
}

func toOutput(o sandbox.Output) job.Output {
	out := job.Output{Text: strings.ToValidUTF8(string(o.Head), "\uFFFD"), Bytes: o.Bytes, Truncated: o.Truncated}
	if o.Truncated {
		out.Tail = strings.ToValidUTF8(string(o.Tail), "\uFFFD")
		out.OmittedBytes = o.Bytes - int64(len(o.Head)) - int64(len(o.Tail))
	}
	return out
}
