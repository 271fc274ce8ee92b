package healer

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
)

// run is one job's pass through the loop.
type run struct {
	l            *Loop
	ex           Executor
	spec         job.Spec
	mode         job.HealMode
	max          int
	allowInstall bool
	retryKills   bool
	cmdTimeout   time.Duration
	deadline     time.Time // zero: none
	scope        string
	log          *slog.Logger

	res       Result
	tried     []string // normalized commands run so far
	installed bool     // RunEnv applies from now on
}

func newRun(ctx context.Context, l *Loop, ex Executor, spec job.Spec, p job.HealPolicy, cmdTimeout time.Duration) *run {
	r := &run{l: l, ex: ex, spec: spec, mode: p.Mode, max: l.cfg.MaxAttempts,
		allowInstall: p.AllowInstall, retryKills: p.RetryResourceKills, cmdTimeout: cmdTimeout,
		log: l.log.With("job", spec.ID)}
	if r.mode == "" {
		r.mode = l.cfg.DefaultMode
	}
	if p.MaxAttempts > 0 && p.MaxAttempts < r.max {
		r.max = p.MaxAttempts
	}
	if r.mode == job.HealOff {
		r.max = 1
	}
	if r.cmdTimeout <= 0 {
		r.cmdTimeout = l.cfg.CommandTimeout
	}
	if d, ok := ctx.Deadline(); ok {
		r.deadline = d
	}
	r.scope = l.cfg.MemoScope(spec)
	return r
}

// step is what the next attempt runs and why.
type step struct {
	action  job.Action
	command string
	install string // installer script run before it
	note    string

	// The repair being tried: its span (ended with the retry's outcome),
	// the fix to remember if the retry succeeds, under fixKey, and
	// memoKey when the fix came from the memo (forgotten if it fails).
	ctx     context.Context
	span    trace.Span
	fix     *Fix
	fixKey  string
	memoKey string
}

// repairer is one link of the repair chain (Loop.chain: memo, install,
// rules, llm). repair either fills in c.next and reports true, or reports
// false after noting with c.noFix what it tried, if anything. An error is
// the Executor's (an install), and ends the job.
type repairer interface {
	repair(ctx context.Context, r *run, c *repairCase) (bool, error)
}

// repairCase is one failure on its way down the repair chain.
type repairCase struct {
	cmd  string // the command that failed
	out  Outcome
	f    Failure
	what string // f.String(), the start of every note
	key  string // the failure's memo fingerprint
	next *step  // the step being built

	// action is the last repair tried, for the span and metrics; tried is
	// what was tried and gave no fix, for the notes.
	action job.Action
	tried  []string
}

// noFix records a repair that was tried and gave no fix.
func (c *repairCase) noFix(why string) { c.tried = append(c.tried, why+";") }

// note is the next attempt's note: the failure, what gave no fix, and
// the decision.
func (c *repairCase) note(decision string) string {
	return strings.Join(append([]string{c.what + " →"}, append(c.tried, decision)...), " ")
}

// settle makes the next step try fix (with the same command when it has
// none), remembered under the failure's fingerprint if the retry works.
func (c *repairCase) settle(fix Fix, decision string) {
	st := c.next
	st.action = fix.Source
	if fix.Command != "" {
		st.command = fix.Command
	}
	st.note = c.note(decision)
	st.fix, st.fixKey = &fix, c.key
}

func (r *run) loop(ctx context.Context) (Result, error) {
	st := step{action: job.ActionInitial, command: r.spec.Command, ctx: ctx}
	for n := 1; ; n++ {
		out, cut, err := r.attempt(st.ctx, n, st)
		if err != nil {
			r.endHeal(st, OutcomeFailed)
			return r.res, fmt.Errorf("healer: attempt %d: %w", n, err)
		}
		f := Classify(out)
		if f.Kind == KindOK {
			r.endHeal(st, OutcomeFixed)
			r.res.Healed = n > 1
			if st.fix != nil && st.memoKey == "" {
				r.l.memo.put(ctx, st.fixKey, *st.fix)
			}
			return r.res, nil
		}
		r.endHeal(st, OutcomeFailed)
		if st.memoKey != "" {
			r.l.memo.forget(ctx, st.memoKey)
		}
		switch {
		case cut && f.Reason == job.ReasonTimeout:
			r.stop("the job deadline cut the command short")
			return r.res, nil
		case f.Terminal(r.retryKills):
			if f.Kind == KindResourceKill {
				r.stop(string(f.Reason) + " is a resource kill: terminal unless heal.retry_resource_kills")
			} else {
				r.stop(string(f.Reason) + " is never retried")
			}
			return r.res, nil
		case n >= r.max:
			if r.max == 1 && r.mode == job.HealOff {
				r.stop("healing is off")
			} else {
				r.stop("attempt limit " + strconv.Itoa(r.max) + " reached")
			}
			return r.res, nil
		}
		next, err := r.heal(ctx, st.command, out, f)
		if err != nil {
			return r.res, err
		}
		if next == nil {
			return r.res, nil
		}
		st = *next
	}
}

// attempt runs one command and records it. cut reports that the command's
// timeout was shortened to fit the job deadline.
func (r *run) attempt(ctx context.Context, n int, st step) (Outcome, bool, error) {
	timeout, cut := r.cmdTimeout, false
	if rem, ok := r.remaining(); ok && rem < timeout {
		timeout, cut = max(rem, 100*time.Millisecond), true
	}
	cmd := Command{Script: st.command, Timeout: timeout}
	if r.installed {
		cmd.Env = maps.Clone(r.l.cfg.RunEnv) // the executor may keep or change it
	}
	ctx, span := r.l.cfg.Tracer.Start(ctx, "paddock.attempt", trace.WithAttributes(
		attribute.String(job.AttrJobID, r.spec.ID),
		attribute.Int(job.AttrAttempt, n),
		attribute.String(job.AttrHealAction, string(st.action)),
		attribute.String(job.AttrCommandSHA256, commandHash(st.command)),
		attribute.Int64(job.AttrCommandTimeoutMS, timeout.Milliseconds()),
	))
	defer span.End()
	t0 := time.Now()
	out, err := r.ex.Exec(ctx, cmd)
	d := time.Since(t0)
	switch {
	case err != nil && out.Reason == "":
		out.Reason, out.ExitCode = job.ReasonInfra, -1
		if ctx.Err() != nil {
			out.Reason = job.ReasonCanceled
		}
	case out.Reason == "": // an executor that reports exit codes only
		out.Reason = Classify(out).Reason
	}
	att := job.Attempt{
		N: n, Action: st.action, Command: st.command, ExitCode: out.ExitCode, Reason: out.Reason,
		StderrTail: tail(out.Stderr, 2048), Install: st.install, Note: st.note,
		StartedAt: t0, DurationMS: d.Milliseconds(),
	}
	r.res.Attempts = append(r.res.Attempts, att)
	r.res.Final, r.res.Reason = out, out.Reason
	r.tried = append(r.tried, normalizeCommand(st.command))
	span.SetAttributes(
		attribute.Int("process.exit.code", out.ExitCode),
		attribute.String(job.AttrReason, string(out.Reason)),
		attribute.Int64(job.AttrStdoutBytes, out.StdoutBytes),
		attribute.Int64(job.AttrStderrBytes, out.StderrBytes),
	)
	if fn := r.l.cfg.SpanAttributes; fn != nil {
		span.SetAttributes(fn(out)...)
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case out.Reason != job.ReasonOK:
		span.SetAttributes(attribute.String("error.type", string(out.Reason)))
		span.SetStatus(codes.Error, Classify(out).String())
	}
	r.log.DebugContext(ctx, "attempt", "n", n, "action", st.action, "exit", out.ExitCode, "reason", out.Reason, "took", d)
	return out, cut, err
}

// heal passes a failure of cmd down the repair chain (Loop.chain) and
// returns the step of the first repairer with a fix. It returns nil when
// none has one (after noting why on the last attempt), or the error of an
// install's Executor.
func (r *run) heal(ctx context.Context, cmd string, out Outcome, f Failure) (*step, error) {
	hctx, span := r.l.cfg.Tracer.Start(ctx, "paddock.heal", trace.WithAttributes(
		attribute.String(job.AttrJobID, r.spec.ID),
		attribute.String(job.AttrHealKind, string(f.Kind)),
	))
	st := &step{ctx: hctx, span: span, command: cmd}
	if _, ok := r.budget(time.Second); !ok {
		return r.giveUp(st, "none", OutcomeNoTime, "too close to the job deadline for another attempt")
	}
	c := &repairCase{cmd: cmd, out: out, f: f, what: f.String(), key: Fingerprint(r.scope, r.spec.Image, cmd, f),
		next: st, action: "none"}
	for _, rep := range r.l.chain {
		ok, err := rep.repair(hctx, r, c)
		if err != nil {
			st.action = c.action
			r.endHeal(*st, OutcomeFailed)
			return nil, err
		}
		if ok {
			return st, nil
		}
	}
	return r.giveUp(st, c.action, OutcomeNoFix, "no repair found: "+strings.TrimSuffix(strings.Join(c.tried, " "), ";"))
}

// giveUp ends a repair step that found nothing to retry with, noting why.
func (r *run) giveUp(st *step, action job.Action, outcome, why string) (*step, error) {
	st.action = action
	r.endHeal(*st, outcome)
	r.stop(why)
	return nil, nil
}

// endHeal ends a repair step's span with its outcome and reports it.
func (r *run) endHeal(st step, outcome string) {
	if st.span == nil {
		return
	}
	action := string(st.action)
	if action == "" {
		action = "none"
	}
	st.span.SetAttributes(attribute.String(job.AttrHealAction, action), attribute.String(job.AttrHealOutcome, outcome))
	if outcome != OutcomeFixed {
		st.span.SetStatus(codes.Error, outcome)
	}
	st.span.End()
	if m := r.l.cfg.Metrics.Heal; m != nil {
		m(st.ctx, action, outcome)
	}
}

// stop notes on the last attempt why no other followed.
func (r *run) stop(why string) {
	a := &r.res.Attempts[len(r.res.Attempts)-1]
	if a.Note != "" {
		a.Note += "; "
	}
	a.Note += "stop: " + why
}

// remaining is the time left before the job deadline, less the margin.
func (r *run) remaining() (time.Duration, bool) {
	if r.deadline.IsZero() {
		return 0, false
	}
	return time.Until(r.deadline) - r.l.cfg.Margin, true
}

// budget returns how long a repair action may take: want, shortened to
// leave Reserve for the retry; ok is false when no useful time is left.
func (r *run) budget(want time.Duration) (time.Duration, bool) {
	rem, ok := r.remaining()
	if !ok {
		return want, true
	}
	left := rem - r.l.cfg.Reserve
	if left < 100*time.Millisecond {
		return 0, false
	}
	return min(want, left), true
}

func (r *run) wasTried(cmd string) bool {
	n := normalizeCommand(cmd)
	for _, t := range r.tried {
		if t == n {
			return true
		}
	}
	return false
}
