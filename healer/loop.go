package healer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

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
	// Install marks an installer run (not the job's command or a repair
	// of it): it gets no stdin, and its output is not the job's.
	Install bool
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
	// Heal is called once per repair step with the action it settled on
	// (install, rules, llm, memo, or none) and its outcome: fixed (the
	// retry succeeded), failed (the retry failed), no_fix (nothing to
	// retry with) or no_time (the job deadline was too close).
	Heal func(ctx context.Context, action, outcome string)
	// Event is called once per Event (n = 1) and, for EventLLMTokens,
	// with the tokens an LLM call used. Signature of
	// telemetry.Metrics.HealEvent.
	Event func(ctx context.Context, event string, n int64)
}

// Events of Metrics.Event (metric attribute paddock.heal.event): a bounded
// set, so that they can label a counter.
const (
	EventInstall        = "install"         // a package install succeeded
	EventInstallFailure = "install_failure" // the installer ran and failed
	EventRuleRepair     = "rule_repair"     // a rule rewrote the command
	EventLLMCall        = "llm_call"        // the LLM answered or failed
	EventLLMError       = "llm_error"       // the call failed (transport, HTTP, timeout)
	EventLLMRefused     = "llm_refused"     // the reply was not a usable command
	EventLLMTokens      = "llm_tokens"      // n = tokens used by one call
	EventMemoHit        = "memo_hit"        // a remembered fix was usable
	EventMemoMiss       = "memo_miss"       // no usable remembered fix
	EventMemoError      = "memo_error"      // the memo store failed
	EventMemoStore      = "memo_store"      // a working fix was remembered
	EventMemoDelete     = "memo_delete"     // a stale fix was forgotten
)

// emit reports an event, when someone listens.
func (m Metrics) emit(ctx context.Context, event string, n int64) {
	if m.Event != nil {
		m.Event(ctx, event, n)
	}
}

// Heal outcomes (span attribute paddock.heal.outcome and Metrics.Heal).
const (
	OutcomeFixed  = "fixed"
	OutcomeFailed = "failed"
	OutcomeNoFix  = "no_fix"
	OutcomeNoTime = "no_time"
)

// Config configures a Loop. Zero fields take the defaults given with each
// field, filled in withDefaults; docs/healing.md is the operator's guide.
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
	// MemoScope partitions the memo (default: the job's tenant; the image
	// is part of every key anyway). A fix found for one job is replayed
	// for another with the same failure, so parties that must not
	// influence each other's commands never share a scope.
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
		c.MemoScope = func(s job.Spec) string {
			if s.Tenant == "" {
				return job.DefaultTenant
			}
			return s.Tenant
		}
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
	memo  *memoRepairer
	chain []repairer // tried in order for every failure (run.heal)
	log   *slog.Logger
}

// New returns a Loop.
func New(cfg Config) (*Loop, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Loop{cfg: cfg, log: cfg.Logger}
	if l.inst, err = newInstaller(cfg); err != nil {
		return nil, err
	}
	llmCfg, err := cfg.LLM.withDefaults()
	if err != nil {
		return nil, err
	}
	warn := newWarnLimiter(cfg.Logger)
	l.memo = &memoRepairer{store: cfg.Memo, timeout: cfg.MemoTimeout, inst: l.inst,
		metrics: cfg.Metrics, warn: warn}
	l.chain = []repairer{
		l.memo,
		l.inst,
		&ruleRepairer{rules: cfg.Rules, tracer: cfg.Tracer, metrics: cfg.Metrics},
		&llmRepairer{cfg: llmCfg, tracer: cfg.Tracer, metrics: cfg.Metrics, warn: warn},
	}
	return l, nil
}

// Run runs spec.Command through ex and heals its failures under policy:
// at most MaxAttempts command runs (fewer if the policy says so, one in
// mode off). cmdTimeout is each command's budget (0 = CommandTimeout);
// ctx's deadline is the job's. The error is ex's (infrastructure, context
// ended, container gone), returned with every attempt recorded so far;
// a job that merely failed returns a nil error and its Result.
func (l *Loop) Run(ctx context.Context, ex Executor, spec job.Spec, policy job.HealPolicy, cmdTimeout time.Duration) (Result, error) {
	r := newRun(ctx, l, ex, spec, policy, cmdTimeout)
	return r.loop(ctx)
}

// warnLimiter rate-limits the loop's warnings (the memo's and the LLM's):
// one per kind every 30 s (golang.org/x/time/rate).
type warnLimiter struct {
	log  *slog.Logger
	mu   sync.Mutex
	kind map[string]*rate.Limiter
}

func newWarnLimiter(log *slog.Logger) *warnLimiter {
	return &warnLimiter{log: log, kind: map[string]*rate.Limiter{}}
}

// warn logs unless a warning of this kind was logged in the last 30 s; it
// reports whether it logged.
func (w *warnLimiter) warn(kind, msg string, args ...any) bool {
	w.mu.Lock()
	l, ok := w.kind[kind]
	if !ok {
		l = rate.NewLimiter(rate.Every(30*time.Second), 1)
		w.kind[kind] = l
	}
	w.mu.Unlock()
	if !l.Allow() {
		return false
	}
	w.log.Warn(msg, args...)
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

func itoa(n int) string { return strconv.Itoa(n) }

// commandHash identifies a command in traces without recording its text
// (the same digest as the worker's paddock.command.sha256).
func commandHash(cmd string) string {
	sum := sha256.Sum256([]byte(cmd))
	return hex.EncodeToString(sum[:8])
}

// quoteNote quotes a name for a note.
func quoteNote(s string) string { return strconv.Quote(s) }
