package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/sandbox/initproto"
)

// Reason is the one cause a command ended with (a subset of job.Reason).
type Reason string

const (
	ReasonOK          Reason = "ok"
	ReasonExitNonzero Reason = "exit_nonzero"
	ReasonTimeout     Reason = "timeout"
	ReasonOOM         Reason = "oom"
	ReasonPidsLimit   Reason = "pids_limit"
	ReasonOutputCap   Reason = "output_cap"
	ReasonFsize       Reason = "fsize"
	ReasonSignal      Reason = "signal"
	ReasonCanceled    Reason = "canceled"
)

// Reasons lists every Reason a command can end with. Each is a job.Reason
// of the same name (sandbox imports no other project package; the worker
// converts them, and its test checks the two sets agree).
func Reasons() []Reason {
	return []Reason{ReasonOK, ReasonExitNonzero, ReasonTimeout, ReasonOOM, ReasonPidsLimit, ReasonOutputCap,
		ReasonFsize, ReasonSignal, ReasonCanceled}
}

// Stream names an output stream.
type Stream int

const (
	Stdout Stream = 1
	Stderr Stream = 2
)

// SessionOptions apply to every command of a session.
type SessionOptions struct {
	// Deadline is the job deadline: the container is destroyed then.
	Deadline time.Time
	// Labels are added to a cold-started container (warm ones carry only
	// the owner and profile labels).
	Labels map[string]string
	// Env is the base environment of every command (after validation by
	// the caller: nothing of the worker's own environment enters).
	Env map[string]string
}

// Command is one command to run in a session.
type Command struct {
	// Script runs with the image's shell (bash -c, else sh -c).
	Script string
	// Argv, when set, runs directly instead of Script.
	Argv []string
	Env  map[string]string
	Dir  string
	// Timeout is the per-command budget (default 30 s); on overrun every
	// process in the container is killed.
	Timeout time.Duration
	// OutputBytes is kept per stream: the first half and the last half.
	OutputBytes int64
	// OnOutput, if set, receives the streamed head of each stream, or,
	// with StreamAll, every byte of both. It runs on the reading goroutine:
	// while it blocks, the command blocks on its writes, so a slow consumer
	// slows only this command.
	OnOutput func(Stream, []byte)
	// StreamAll passes every byte of output to OnOutput as it is printed
	// (the session then keeps head and tail itself). RateBytes, when > 0,
	// bounds the output init reads per second, both streams together.
	StreamAll bool
	RateBytes int64
	// Stdin is the command's standard input (default: empty).
	Stdin []byte
	// OutputKill, when > 0, replaces the runtime's OutputKillBytes for
	// this command (a command whose output is kept may print more).
	OutputKill int64
	// Spill, when set, has init write the complete stdout and stderr into
	// the workspace, at <WorkspaceDir>/.paddock/out/<Spill>.stdout and
	// .stderr (one path element; the job's id). SpillMax, when > 0,
	// bounds each file.
	Spill    string
	SpillMax int64
}

// Output is one captured stream: Head is the start, Tail the end; Bytes
// counts everything printed.
type Output struct {
	Head, Tail []byte
	Bytes      int64
	Truncated  bool
}

// Text returns the whole output when it was kept whole, else the head.
func (o Output) Text() string { return string(o.Head) }

// Outcome is how a command ended.
type Outcome struct {
	ExitCode int // -1 when killed by a signal
	Signal   int
	Reason   Reason
	Stdout   Output
	Stderr   Output
	Duration time.Duration
	// OOMKills and PidsMax are cgroup counter deltas over the command.
	OOMKills, PidsMax int64
	// Leftover counts processes the command left behind (killed).
	Leftover int
	// SpillBytes and SpillErr are init's account of the spill files
	// (stdout, stderr), when Command.Spill asked for them.
	SpillBytes [2]int64
	SpillErr   [2]string
	Argv       []string
	// Ended, when set, says how the job's processes ended the sandbox
	// itself during the command (Run then returns ErrSandboxEnded).
	Ended string
}

// Session is one job's container: never used before, destroyed on Close.
type Session struct {
	r       *Runtime
	b       *box
	profile Profile
	opts    SessionOptions
	Pooled  bool

	mu       sync.Mutex // one command at a time
	closeMu  sync.Mutex
	closed   bool
	broken   error
	reqID    int
	deadline *time.Timer
}

// errDeadline breaks a session whose job deadline passed.
var errDeadline = fmt.Errorf("%w: job deadline passed", ErrSessionBroken)

func newSession(r *Runtime, b *box, p Profile, pooled bool, opts SessionOptions) *Session {
	s := &Session{r: r, b: b, profile: p, opts: opts, Pooled: pooled}
	if !opts.Deadline.IsZero() {
		// Armed under the lock its callback takes (through Close): a
		// deadline already past fires at once.
		s.closeMu.Lock()
		s.deadline = time.AfterFunc(time.Until(opts.Deadline), func() { s.breakSession(errDeadline) })
		s.closeMu.Unlock()
	}
	return s
}

// Broker returns the listener of the box's broker socket (BrokerTarget in
// the box), once: the caller serves it and closes it. Nil when the runtime
// makes none (Config.BrokerSocket off) or it was taken already. Connections
// made before it is served wait in its backlog; once it is closed (by the
// caller, or when the session ends) the box's connections are refused.
func (s *Session) Broker() net.Listener {
	if ln := s.b.takeBroker(); ln != nil {
		return ln
	}
	return nil
}

// ContainerID returns the session's container id.
func (s *Session) ContainerID() string { return s.b.id }

// ContainerName returns the session's container name.
func (s *Session) ContainerName() string { return s.b.name }

// Close destroys the container (in the background). Idempotent; safe from
// any goroutine, including while Run is in progress (Run then returns).
func (s *Session) Close() {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.deadline != nil {
		s.deadline.Stop()
	}
	s.r.destroy(s.b)
}

// Destroy force-removes the container and returns once the engine confirms
// that it is gone: use it before releasing anything the container could
// still touch (a volume lock). Idempotent with Close.
func (s *Session) Destroy(ctx context.Context) error {
	s.closeMu.Lock()
	if s.deadline != nil {
		s.deadline.Stop()
	}
	already := s.closed
	s.closed = true
	s.closeMu.Unlock()
	s.b.release()
	err := s.r.remove(ctx, s.b, true)
	if err != nil {
		err = infra("remove container", err, true)
	}
	if !already {
		s.r.stats.Removed.Add(1)
	}
	return err
}

func (s *Session) breakSession(err error) {
	s.closeMu.Lock()
	if s.broken == nil {
		s.broken = err
	}
	s.closeMu.Unlock()
	s.Close()
}

func (s *Session) brokenErr() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.broken != nil {
		return s.broken
	}
	if s.closed {
		return ErrClosed
	}
	return nil
}

// Probe asks init what it sees of its own sandbox (self-test).
func (s *Session) Probe(ctx context.Context) (initproto.Facts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var f initproto.Facts
	if err := s.b.send(initproto.TypeProbe, nil); err != nil {
		return f, infra("probe", err, true)
	}
	for {
		select {
		case fr, ok := <-s.b.frames:
			if !ok {
				return f, infra("probe", s.b.deathCause(), true)
			}
			if fr.typ == initproto.TypeFacts {
				return f, json.Unmarshal(fr.payload, &f)
			}
		case <-ctx.Done():
			return f, ctx.Err()
		}
	}
}

// Run runs one command and returns how it ended. The returned error is nil
// for every outcome of the command itself (non-zero exit, timeout, OOM …);
// it is an *InfraError when the sandbox failed, ErrSessionBroken when the
// container is gone (job deadline), or the context's cause when ctx ended
// (the container is then destroyed and Outcome.Reason is canceled).
func (s *Session) Run(ctx context.Context, cmd Command) (Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run(ctx, cmd)
}

// shell is the box's own shell, as init found it before any job ran.
func (s *Session) shell() string {
	if s.b.hello.Bash != "" {
		return s.b.hello.Bash
	}
	return s.b.hello.Sh
}

func (s *Session) run(ctx context.Context, cmd Command) (Outcome, error) {
	if d := s.opts.Deadline; !d.IsZero() && !time.Now().Before(d) {
		// The deadline's timer may not have run yet: a passed deadline
		// breaks the session here too, so no command starts after it.
		s.breakSession(errDeadline)
	}
	if err := s.brokenErr(); err != nil {
		if errors.Is(err, errDeadline) {
			return Outcome{Reason: ReasonTimeout, ExitCode: -1}, err
		}
		return Outcome{}, err
	}
	req, timeout := s.request(cmd)
	payload, err := json.Marshal(req)
	if err != nil {
		return Outcome{}, err
	}
	if err := s.b.send(initproto.TypeRun, payload); err != nil {
		if s.brokenErr() != nil {
			// The deadline or Close let go of the box while the request
			// was being sent: that is the answer, not the send's error.
			return s.lost(Outcome{})
		}
		s.breakSession(fmt.Errorf("%w: %v", ErrSessionBroken, err))
		return Outcome{}, infra("send command", err, true)
	}
	defer s.demoteLater()() // weight.go
	return s.await(ctx, req, timeout, cmd.OnOutput)
}

// request numbers cmd and turns it into init's run request, with the
// per-command defaults filled in; it also returns the command's timeout.
func (s *Session) request(cmd Command) (initproto.Request, time.Duration) {
	argv, path := cmd.Argv, ""
	if argv == nil {
		// The box's own shell, by the path init found; argv[0] is its
		// name, so that its messages read "bash: …" as agents expect.
		path = s.shell()
		argv = []string{filepath.Base(path), "-c", cmd.Script}
	}
	timeout := cmd.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	outCap := cmd.OutputBytes
	if outCap <= 0 {
		outCap = 1 << 20
	}
	dir := cmd.Dir
	if dir == "" {
		dir = WorkspaceDir
	}
	s.reqID++
	return initproto.Request{
		ID: s.reqID, Argv: argv, Path: path, Env: buildEnv(s.opts.Env, cmd.Env), Dir: dir,
		TimeoutMS: timeout.Milliseconds(), OutputCap: outCap, OutputKill: cmp.Or(cmd.OutputKill, s.r.cfg.OutputKillBytes),
		StreamAll: cmd.StreamAll, RateBytes: cmd.RateBytes, Stdin: cmd.Stdin,
		Spill: cmd.Spill, SpillMax: cmd.SpillMax,
	}, timeout
}

// await reads init's frames for the sent request req, keeping the
// command's output and passing it to onOutput (if set), until init reports
// the exit, the control connection ends, the guard fires or ctx ends.
func (s *Session) await(ctx context.Context, req initproto.Request, timeout time.Duration, onOutput func(Stream, []byte)) (Outcome, error) {
	// init enforces the timeout; this guard only catches an init that
	// stopped answering.
	guard := time.NewTimer(timeout + 10*time.Second)
	defer guard.Stop()

	var o Outcome
	o.Argv = req.Argv
	outCap := req.OutputCap
	half := outCap / 2
	// What init sends is bounded by this worker's numbers, never by the
	// frames: heads to half the cap, tails to the other half.
	var tails [2][]byte
	// With StreamAll the tails are kept here, from the live bytes past
	// each head.
	var rings [2]*initproto.Tail
	for {
		select {
		case f, ok := <-s.b.frames:
			if !ok {
				return s.lost(o)
			}
			switch f.typ {
			case initproto.TypeStdout, initproto.TypeStderr:
				st := keepOutput(&o, &rings, f, half, outCap-half, req.StreamAll)
				if onOutput != nil {
					onOutput(st, f.payload)
				}
				releaseFrame(f.payload)
			case initproto.TypeTailOut, initproto.TypeTailErr:
				t := &tails[0]
				if f.typ == initproto.TypeTailErr {
					t = &tails[1]
				}
				if room := outCap - half - int64(len(*t)); room > 0 {
					*t = append(*t, f.payload[:min(int64(len(f.payload)), room)]...)
				}
			case initproto.TypeExit:
				var x initproto.Exit
				if err := json.Unmarshal(f.payload, &x); err != nil || x.ID != req.ID {
					// Only init can write here, so this is a bug, not the job:
					// retrying would fail the same way.
					s.breakSession(fmt.Errorf("%w: bad exit frame", ErrSessionBroken))
					return o, infra("run command", fmt.Errorf("paddock-init sent a malformed exit frame (id %d, want %d: %v); this is a bug in Paddock, please report it", x.ID, req.ID, err), false)
				}
				for i, r := range rings {
					if r != nil {
						tails[i] = r.Take() // no copy of half the cap per flooded stream
					}
				}
				finish(&o, x, tails, half)
				return o, nil
			default:
				s.breakSession(fmt.Errorf("%w: unexpected frame", ErrSessionBroken))
				return o, infra("run command", fmt.Errorf("paddock-init sent an unexpected frame %q during a command; this is a bug in Paddock, please report it", f.typ), false)
			}
		case <-guard.C:
			s.breakSession(fmt.Errorf("%w: init did not end a timed-out command", ErrSessionBroken))
			o.Reason, o.ExitCode = ReasonTimeout, -1
			return o, nil
		case <-ctx.Done():
			s.breakSession(fmt.Errorf("%w: %v", ErrSessionBroken, context.Cause(ctx)))
			o.Reason, o.ExitCode = ReasonCanceled, -1
			return o, context.Cause(ctx)
		}
	}
}

// keepOutput adds an output frame's bytes to o's head of its stream, and
// what is past the head to the stream's tail ring (made on first use, of
// tailCap bytes) when every byte is streamed. It returns the stream.
func keepOutput(o *Outcome, rings *[2]*initproto.Tail, f frame, half, tailCap int64, streamAll bool) Stream {
	st, dst, i := Stdout, &o.Stdout, 0
	if f.typ == initproto.TypeStderr {
		st, dst, i = Stderr, &o.Stderr, 1
	}
	rest := f.payload
	if room := half - int64(len(dst.Head)); room > 0 {
		n := int(min(int64(len(rest)), room))
		if cap(dst.Head)-len(dst.Head) < n {
			// Doubling, but never past the head's bound: append's own
			// growth would leave up to a quarter more of every flood's
			// head unused.
			head := make([]byte, len(dst.Head), min(max(2*cap(dst.Head), len(dst.Head)+n), int(half)))
			copy(head, dst.Head)
			dst.Head = head
		}
		dst.Head = append(dst.Head, rest[:n]...)
		rest = rest[n:]
	}
	if streamAll && len(rest) > 0 {
		if rings[i] == nil {
			rings[i] = initproto.NewTail(int(tailCap))
		}
		_, _ = rings[i].Write(rest)
	}
	return st
}

// lost handles a control connection that ended during a command. If the
// worker let go of the box (deadline, Close), that is the answer. If the
// engine cannot say what became of the container, the engine failed
// (retryable infra). Otherwise only the job's own processes were in the
// box: the job ended it, and the outcome says how (ErrSandboxEnded).
func (s *Session) lost(o Outcome) (Outcome, error) {
	if err := s.brokenErr(); err != nil {
		s.Close()
		if errors.Is(err, errDeadline) {
			o.Reason, o.ExitCode = ReasonTimeout, -1
			return o, err
		}
		return o, infra("run command", err, true)
	}
	if err := s.b.deathCause(); errors.Is(err, initproto.ErrProtocol) {
		s.breakSession(fmt.Errorf("%w: %v", ErrSessionBroken, err))
		return o, infra("run command", fmt.Errorf("paddock-init broke the protocol (%v); this is a bug in Paddock, please report it", err), false)
	}
	reason, why, err := s.r.ended(s.b)
	if err != nil {
		s.breakSession(fmt.Errorf("%w: %v", ErrSessionBroken, err))
		return o, err
	}
	s.breakSession(ErrSandboxEnded)
	o.Reason, o.ExitCode, o.Ended = reason, -1, why
	return o, ErrSandboxEnded
}

func finish(o *Outcome, x initproto.Exit, tails [2][]byte, half int64) {
	o.ExitCode, o.Signal = x.ExitCode, x.Signal
	o.Duration = time.Duration(x.DurationNS)
	o.OOMKills, o.PidsMax, o.Leftover = x.OOMKills, x.PidsMax, x.Leftover
	o.SpillBytes, o.SpillErr = x.SpillBytes, boundSpillErr(x.SpillErr)
	fill := func(dst *Output, total int64, tail []byte) {
		dst.Bytes = total
		if total <= int64(len(dst.Head))+int64(len(tail)) {
			dst.Head = append(dst.Head, tail...) // nothing dropped: whole output
		} else {
			dst.Tail, dst.Truncated = tail, true
		}
	}
	fill(&o.Stdout, x.StdoutBytes, tails[0])
	fill(&o.Stderr, x.StderrBytes, tails[1])
	if x.StartErr != "" && o.Stderr.Bytes == 0 {
		msg := []byte("paddock: " + x.StartErr + "\n")
		o.Stderr = Output{Head: msg, Bytes: int64(len(msg))}
	}
	o.Reason = classify(x)
}

// classify picks the one reason of a command. Limits the kernel enforced
// come first: a command that hit its pids or memory limit failed even if
// its shell exited 0, because some of its work was killed or refused.
func classify(x initproto.Exit) Reason {
	switch {
	case x.PidsKilled || x.PidsMax > 0:
		return ReasonPidsLimit
	case x.OOMKills > 0:
		return ReasonOOM
	case x.OutputKilled:
		return ReasonOutputCap
	case x.Signal == int(syscall.SIGXFSZ) || x.ExitCode == 128+int(syscall.SIGXFSZ):
		return ReasonFsize
	case x.TimedOut:
		return ReasonTimeout
	case x.Signal != 0:
		return ReasonSignal
	case x.ExitCode != 0:
		return ReasonExitNonzero
	}
	return ReasonOK
}

// defaultEnv is every command's base environment; nothing of the worker's
// own environment is ever added.
var defaultEnv = map[string]string{
	"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" +
		InstallDir + "/usr/local/bin:" + InstallDir + "/usr/bin:" + InstallDir + "/bin",
	"HOME":   "/tmp",
	"TMPDIR": "/tmp",
	"LANG":   "C.UTF-8",
	"USER":   "sandbox",
}

func buildEnv(layers ...map[string]string) []string {
	m := make(map[string]string, len(defaultEnv))
	for k, v := range defaultEnv {
		m[k] = v
	}
	for _, l := range layers {
		for k, v := range l {
			m[k] = v
		}
	}
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// boundSpillErr bounds init's spill errors, which the box could forge, to
// a line of printable text each.
func boundSpillErr(e [2]string) [2]string {
	for i := range e {
		if len(e[i]) > 200 {
			e[i] = e[i][:200]
		}
		e[i] = strings.ToValidUTF8(e[i], "?")
		e[i] = strings.Map(func(r rune) rune {
			if r < ' ' || r == 0x7f {
				return ' '
			}
			return r
		}, e[i])
	}
	return e
}
