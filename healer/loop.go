package healer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
)

// Command is one command for the Executor to run in the job's container.
type Command struct {
	// Script runs with the container's shell (bash -c, else sh -c).
	Script string
	// Timeout is the command's own budget; the executor kills every
	// process of the command when it passes.
	Timeout time.Duration
	// Env is added to the session's environment for this command only.
	Env map[string]string
}

// Outcome is how a command ended, as the healer needs it.
type Outcome struct {
	ExitCode int
	// Reason is the one cause the sandbox gave (ok, exit_nonzero,
	// timeout, oom, pids_limit, output_cap, fsize, signal, canceled).
	Reason job.Reason
	// Stdout and Stderr are the captured text: whole, or head and tail
	// when the stream passed its cap. The healer reads the error lines
	// from Stderr and keeps only bounded tails.
	Stdout, Stderr           string
	StdoutBytes, StderrBytes int64
	Duration                 time.Duration
	// Detail is the executor's own record of the run (e.g. a
	// sandbox.Outcome), untouched by the healer, so that the caller can
	// build its result from the final one.
	Detail any
}

// Executor runs commands in one job's container, one at a time. An error
// means the command's fate is unknown (infrastructure failure, context
// ended, container gone); every way the command itself can end is an
// Outcome.
type Executor interface {
	Exec(ctx context.Context, cmd Command) (Outcome, error)
}

// Result is what a Run did.
type Result struct {
	// Attempts are every command run, in order.
	Attempts []job.Attempt
	// Final is the outcome of the last attempt.
	Final Outcome
	// Reason is the job's reason as far as the loop knows (Final's).
	Reason job.Reason
	// Healed is true when a repair made the job succeed.
	Healed bool
	// LLMCalls and LLMTokens are what the job spent on the LLM.
	LLMCalls, LLMTokens int
}

// Metrics are optional callbacks for the worker's meters; nil fields are
// skipped. Heal has the signature of telemetry.Metrics.HealAttempt.
type Metrics struct {
	// Attempt is called after every command run.
	Attempt func(ctx context.Context, action job.Action, reason job.Reason, d time.Duration)
	// Heal is called once per repair step with the action it settled on
	// (install, rules, llm, memo, or none) and its outcome: fixed (the
	// retry succeeded), failed (the retry failed), no_fix (nothing to
	// retry with) or no_time (the job deadline was too close).
	Heal func(ctx context.Context, action, outcome string)
	// Memo is called after every memo lookup that answered.
	Memo func(ctx context.Context, hit bool)
	// LLM is called after every call to the LLM endpoint.
	LLM func(ctx context.Context, inputTokens, outputTokens int, err error)
}

// Heal outcomes (span attribute paddock.heal.outcome and Metrics.Heal).
const (
	OutcomeFixed  = "fixed"
	OutcomeFailed = "failed"
	OutcomeNoFix  = "no_fix"
	OutcomeNoTime = "no_time"
)

// Stats are counters since New; safe to read at any time.
type Stats struct {
	Runs, Attempts, Healed                     atomic.Int64
	Installs, InstallFailures, RuleRepairs     atomic.Int64
	LLMCalls, LLMErrors, LLMRefused, LLMTokens atomic.Int64
	MemoHits, MemoMisses, MemoErrors           atomic.Int64
	MemoStores, MemoDeletes                    atomic.Int64
}

// Config configures a Loop. Zero fields take the defaults of DESIGN.md §4,
// filled in withDefaults.
type Config struct {
	// MaxAttempts bounds the command runs of a job (default 3); a job's
	// policy may ask for fewer.
	MaxAttempts int
	// DefaultMode applies to a job whose policy names no mode (default
	// rules). llm without an LLM configured acts as rules.
	DefaultMode job.HealMode
	// CommandTimeout is used when Run is given none (default 30 s).
	CommandTimeout time.Duration
	// InstallTimeout bounds one installer run (default 60 s).
	InstallTimeout time.Duration

	// Installer is the install command template (default
	// DefaultInstaller); see DefaultInstaller for its fields.
	Installer string
	// Packages overrides the built-in binary → packages table; an empty
	// list disables installs for that binary.
	Packages map[string][]string
	// MappedOnly limits installs to binaries in the table (otherwise a
	// binary whose name is a valid Debian package name is looked up under
	// that name).
	MappedOnly bool
	// Prefix and Source are the installer's target and package source
	// directories in the container (DefaultPrefix, DefaultSource).
	Prefix, Source string
	// InstallEnv is added to the installer's environment (e.g.
	// PIP_INDEX_URL of a mirror the operator grants).
	InstallEnv map[string]string
	// RunEnv is added to every command after an install (default
	// LD_LIBRARY_PATH and PYTHONUSERBASE under Prefix); a non-nil empty
	// map adds nothing.
	RunEnv map[string]string

	// Rules are the deterministic repairs, in order (nil = DefaultRules();
	// a non-nil empty slice disables rules).
	Rules []Rule
	// LLM enables the LLM repairer for jobs in llm mode.
	LLM *LLMConfig

	// Memo remembers fixes that worked (nil = no memo).
	Memo MemoStore
	// MemoScope partitions the memo (default: one scope for the fleet).
	// A fix found for one job is replayed for another with the same
	// failure, so a fleet shared by parties that must not influence each
	// other's commands should scope by tenant (a label, the queue).
	MemoScope func(job.Spec) string
	// MemoTimeout bounds each memo call (default 2 s).
	MemoTimeout time.Duration

	// Reserve is the least time a retry must have before the job
	// deadline for a repair to start; installs and LLM calls end early
	// enough to leave it (default 5 s).
	Reserve time.Duration
	// Margin ends every command this long before the job deadline, so
	// the sandbox reports a timeout instead of the context ending under
	// it (default 2 s).
	Margin time.Duration

	Logger *slog.Logger
	// Tracer records the spans (default otel.Tracer of this package).
	Tracer trace.Tracer
	// SpanAttributes, if set, adds attributes to every attempt span from
	// the outcome (e.g. sandbox counters found in Outcome.Detail).
	SpanAttributes func(Outcome) []attribute.KeyValue
	Metrics        Metrics
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.DefaultMode == "" {
		c.DefaultMode = job.HealRules
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = 30 * time.Second
	}
	if c.InstallTimeout == 0 {
		c.InstallTimeout = 60 * time.Second
	}
	if c.Installer == "" {
		c.Installer = DefaultInstaller
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.RunEnv == nil {
		c.RunEnv = defaultRunEnv(c.Prefix)
	}
	if c.Rules == nil {
		c.Rules = DefaultRules()
	}
	if c.MemoScope == nil {
		c.MemoScope = func(job.Spec) string { return "" }
	}
	if c.MemoTimeout == 0 {
		c.MemoTimeout = 2 * time.Second
	}
	if c.Reserve == 0 {
		c.Reserve = 5 * time.Second
	}
	if c.Margin == 0 {
		c.Margin = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Logger = c.Logger.With("component", "healer")
	if c.Tracer == nil {
		c.Tracer = otel.Tracer("github.com/paddockhq/paddock/healer")
	}
	switch {
	case c.MaxAttempts < 1:
		return c, fmt.Errorf("%w: max attempts %d must be at least 1", ErrConfig, c.MaxAttempts)
	case c.DefaultMode != job.HealOff && c.DefaultMode != job.HealRules && c.DefaultMode != job.HealLLM:
		return c, fmt.Errorf("%w: default mode %q is not off, rules or llm", ErrConfig, c.DefaultMode)
	case c.CommandTimeout < 0 || c.InstallTimeout < 0 || c.MemoTimeout < 0 || c.Reserve < 0 || c.Margin < 0:
		return c, fmt.Errorf("%w: timeouts must not be negative", ErrConfig)
	case !strings.HasPrefix(c.Prefix, "/") || !strings.HasPrefix(c.Source, "/"):
		return c, fmt.Errorf("%w: install prefix %q and source %q must be absolute paths", ErrConfig, c.Prefix, c.Source)
	}
	for i, r := range c.Rules {
		if r.Apply == nil || r.Name == "" {
			return c, fmt.Errorf("%w: rule %d needs a name and an Apply func", ErrConfig, i)
		}
	}
	return c, nil
}

// Loop is the self-healing loop. One Loop serves every job of a worker;
// Run is safe for concurrent use.
type Loop struct {
	cfg   Config
	inst  *installer
	llm   *llmRepairer
	log   *slog.Logger
	stats Stats

	warnMu   sync.Mutex
	lastWarn map[string]time.Time
}

// New returns a Loop.
func New(cfg Config) (*Loop, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	inst, err := newInstaller(cfg.Installer, cfg.Packages, cfg.MappedOnly, cfg.Prefix, cfg.Source)
	if err != nil {
		return nil, err
	}
	l := &Loop{cfg: cfg, inst: inst, log: cfg.Logger, lastWarn: map[string]time.Time{}}
	llmCfg, err := cfg.LLM.withDefaults()
	if err != nil {
		return nil, err
	}
	if llmCfg != nil {
		l.llm = &llmRepairer{cfg: llmCfg, tracer: cfg.Tracer}
	}
	return l, nil
}

// Stats returns the loop's counters.
func (l *Loop) Stats() *Stats { return &l.stats }

// Run runs spec.Command through ex and heals its failures under policy:
// at most MaxAttempts command runs (fewer if the policy says so, one in
// mode off). cmdTimeout is each command's budget (0 = CommandTimeout);
// ctx's deadline is the job's. The error is ex's (infrastructure, context
// ended, container gone), returned with every attempt recorded so far;
// a job that merely failed returns a nil error and its Result.
func (l *Loop) Run(ctx context.Context, ex Executor, spec job.Spec, policy job.HealPolicy, cmdTimeout time.Duration) (Result, error) {
	r := l.newRun(ctx, ex, spec, policy, cmdTimeout)
	l.stats.Runs.Add(1)
	return r.loop(ctx)
}

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
	tokens    int      // LLM tokens spent
}

func (l *Loop) newRun(ctx context.Context, ex Executor, spec job.Spec, p job.HealPolicy, cmdTimeout time.Duration) *run {
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
			if r.res.Healed {
				r.l.stats.Healed.Add(1)
			}
			if st.fix != nil && st.memoKey == "" {
				r.memoPut(ctx, st.fixKey, *st.fix)
			}
			return r.res, nil
		}
		r.endHeal(st, OutcomeFailed)
		if st.memoKey != "" {
			r.memoDelete(ctx, st.memoKey)
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
		attribute.String("paddock.job.id", r.spec.ID),
		attribute.Int("paddock.attempt", n),
		attribute.String("paddock.heal.action", string(st.action)),
		attribute.String("paddock.command.sha256", commandHash(st.command)),
		attribute.Int64("paddock.command.timeout_ms", timeout.Milliseconds()),
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
	r.l.stats.Attempts.Add(1)
	span.SetAttributes(
		attribute.Int("process.exit.code", out.ExitCode),
		attribute.String("paddock.job.reason", string(out.Reason)),
		attribute.Int64("paddock.stdout.bytes", out.StdoutBytes),
		attribute.Int64("paddock.stderr.bytes", out.StderrBytes),
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
	if m := r.l.cfg.Metrics.Attempt; m != nil {
		m(ctx, st.action, out.Reason, d)
	}
	r.log.Debug("attempt", "n", n, "action", st.action, "exit", out.ExitCode, "reason", out.Reason, "took", d)
	return out, cut, err
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

// heal picks the repair for a failure of cmd: the memo, an install, the
// rules, then the LLM. It returns nil when nothing applies (after noting
// why on the last attempt), or the error of an install's Executor.
func (r *run) heal(ctx context.Context, cmd string, out Outcome, f Failure) (*step, error) {
	hctx, span := r.l.cfg.Tracer.Start(ctx, "paddock.heal", trace.WithAttributes(
		attribute.String("paddock.job.id", r.spec.ID),
		attribute.String("paddock.heal.kind", string(f.Kind)),
	))
	st := &step{ctx: hctx, span: span, command: cmd}
	giveUp := func(action, outcome, why string) (*step, error) {
		st.action = job.Action(action)
		r.endHeal(*st, outcome)
		r.stop(why)
		return nil, nil
	}
	if _, ok := r.budget(time.Second); !ok {
		return giveUp("none", OutcomeNoTime, "too close to the job deadline for another attempt")
	}
	what := f.String()
	action := "none"   // the last repair tried, for the span and metrics
	var tried []string // what was tried and did not give a fix, for the notes
	fail := func(err error) (*step, error) {
		st.action = job.Action(action)
		r.endHeal(*st, OutcomeFailed)
		return nil, err
	}
	note := func(decision string) string {
		return strings.Join(append([]string{what + " →"}, append(tried, decision)...), " ")
	}
	key := Fingerprint(r.scope, r.spec.Image, cmd, f)

	// 1. The memo: a fix that worked for the same failure before.
	if fix, ok := r.memoGet(hctx, key); ok {
		action = string(job.ActionMemo)
		used, why, err := r.useMemo(hctx, st, key, fix, what)
		if err != nil {
			return fail(err)
		}
		if used {
			return st, nil
		}
		tried = append(tried, why+";")
	}

	// 2. An install for a missing command, when the job allows it.
	if f.Kind == KindMissingCommand && r.allowInstall && !f.ExplicitPath {
		if pkgs := r.l.inst.packagesFor(f.Binary); len(pkgs) > 0 {
			action = string(job.ActionInstall)
			script, desc, ok, err := r.install(hctx, f.Binary, pkgs)
			if err != nil {
				return fail(err)
			}
			st.install = script
			if ok {
				st.action = job.ActionInstall
				st.note = note(desc + "; same command again")
				st.fix = &Fix{Source: job.ActionInstall, Binary: f.Binary, Packages: pkgs}
				st.fixKey = key
				return st, nil
			}
			tried = append(tried, desc+";")
		}
	}

	// 3. Deterministic rules.
	for _, rule := range r.l.cfg.Rules {
		fixed, ok := rule.Apply(cmd, f)
		if !ok || strings.TrimSpace(fixed) == "" {
			continue
		}
		if r.wasTried(fixed) {
			tried = append(tried, "rule "+rule.Name+" gives a command already tried;")
			continue
		}
		_, rspan := r.l.cfg.Tracer.Start(hctx, "paddock.rule", trace.WithAttributes(attribute.String("paddock.heal.rule", rule.Name)))
		rspan.End()
		r.l.stats.RuleRepairs.Add(1)
		st.action, st.command = job.ActionRules, fixed
		st.note = note("rule " + rule.Name)
		st.fix = &Fix{Source: job.ActionRules, Command: fixed}
		st.fixKey = key
		return st, nil
	}
	if len(r.l.cfg.Rules) > 0 {
		tried = append(tried, "no rule applies;")
	}

	// 4. The LLM.
	switch {
	case r.mode != job.HealLLM:
	case r.l.llm == nil:
		tried = append(tried, "no LLM configured on this worker;")
	default:
		fixed, desc, err := r.askLLM(hctx, cmd, out, f)
		if err == nil {
			st.action, st.command = job.ActionLLM, fixed
			st.note = note(desc)
			st.fix = &Fix{Source: job.ActionLLM, Command: fixed}
			st.fixKey = key
			return st, nil
		}
		tried = append(tried, desc+";")
		return giveUp("llm", OutcomeNoFix, "no repair found: "+strings.TrimSuffix(strings.Join(tried, " "), ";"))
	}
	return giveUp(action, OutcomeNoFix, "no repair found: "+strings.TrimSuffix(strings.Join(tried, " "), ";"))
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
	st.span.SetAttributes(attribute.String("paddock.heal.action", action), attribute.String("paddock.heal.outcome", outcome))
	if outcome != OutcomeFixed {
		st.span.SetStatus(codes.Error, outcome)
	}
	st.span.End()
	if m := r.l.cfg.Metrics.Heal; m != nil {
		m(st.ctx, action, outcome)
	}
}

// warnLimited logs at most one warning per kind every 30 s; it reports
// whether it logged.
func (l *Loop) warnLimited(kind, msg string, args ...any) bool {
	l.warnMu.Lock()
	now := time.Now()
	if now.Sub(l.lastWarn[kind]) < 30*time.Second {
		l.warnMu.Unlock()
		return false
	}
	l.lastWarn[kind] = now
	l.warnMu.Unlock()
	l.log.Warn(msg, args...)
	return true
}

// tail returns at most n bytes of the end of s, starting on a rune
// boundary, as valid UTF-8.
func tail(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// truncate returns at most n bytes of the start of s, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func itoa(n int) string { return strconv.Itoa(n) }

// commandHash identifies a command in traces without recording its text
// (the same digest as the worker's paddock.command.sha256).
func commandHash(cmd string) string {
	sum := sha256.Sum256([]byte(cmd))
	return hex.EncodeToString(sum[:8])
}

// quoteNote quotes a name for a note.
func quoteNote(s string) string { return strconv.Quote(s) }
