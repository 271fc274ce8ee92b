package worker

import (
	"context"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
)

// NoopNote is the note on every attempt of a job run by the no-op executor
// (Config.NoopExecutor), so that no such result passes for a real run.
const NoopNote = "no-op executor (bench only): the command was not run; exit 0, empty output"

// noopExec is the healer.Executor of Config.NoopExecutor: every command
// "runs" at once with exit 0 and empty output. It still goes through the
// run's agent I/O hooks (live output, kept output), as a real command does.
type noopExec struct {
	io  *runIO
	ctx context.Context // the job's context, for the I/O hooks
}

// Exec ends the command at once with exit 0, or with the context's error
// when the job was interrupted first.
func (e noopExec) Exec(ctx context.Context, c healer.Command) (healer.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return healer.Outcome{}, err
	}
	var cmd sandbox.Command
	e.io.command(e.ctx, &cmd, c)()
	return healer.Outcome{Reason: job.ReasonOK, Detail: sandbox.Outcome{Reason: sandbox.ReasonOK}}, nil
}

// runNoop is runJob without a sandbox (Config.NoopExecutor): the heal loop
// runs the job's command through noopExec, and the job ends as a real one
// does (record, index, result publish); only the container is missing.
func (w *Worker) runNoop(ctx context.Context, r *jobRun) error {
	r.io = w.newRunIO(r)
	defer r.io.end("") // no end marker unless finish gave one
	var policy job.HealPolicy
	if r.spec.Heal != nil {
		policy = *r.spec.Heal
	}
	hctx, cancel := context.WithDeadline(ctx, r.deadline())
	defer cancel()
	hres, err := w.cfg.Healer.Run(hctx, noopExec{io: r.io, ctx: ctx}, r.spec, policy, r.eff.CommandTimeout)
	r.res.Attempts = hres.Attempts
	for i := range r.res.Attempts {
		a := &r.res.Attempts[i]
		if a.Note == "" {
			a.Note = NoopNote
		} else {
			a.Note += "; " + NoopNote
		}
	}
	switch {
	case err == nil:
		out, _ := hres.Final.Detail.(sandbox.Outcome)
		return w.commandEnded(ctx, r, hres, out, false)
	case ctx.Err() != nil:
		dctx, cancel := detached(ctx)
		defer cancel()
		if w.canceledAfter(ctx, dctx, r) {
			markLast(&r.res, job.ReasonCanceled)
			return w.finish(ctx, r, job.ReasonCanceled, "canceled while running (no-op executor)")
		}
		return requeue(ctx, r.key)
	case hctx.Err() != nil:
		return w.commandEnded(ctx, r, hres, sandbox.Outcome{}, true)
	default:
		return w.infraFail(ctx, r, err)
	}
}
