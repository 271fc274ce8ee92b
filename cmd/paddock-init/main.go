// Command paddock-init is PID 1 of every Paddock sandbox container. It is
// bind-mounted read-only at /.paddock/init and speaks the framed protocol of
// package initproto over a private unix socket: at start it connects to
// /.paddock/ctl/init.sock, where its worker accepts exactly this one
// connection and then unlinks the socket.
//
// The job's code runs under the same uid, so init keeps itself out of its
// reach before it runs anything:
//   - it is not dumpable (prctl PR_SET_DUMPABLE 0): /proc/1/fd, mem,
//     environ, maps and ptrace are closed to the job;
//   - it ignores every signal it can (the kernel never delivers SIGKILL or
//     SIGSTOP to a namespace's init from inside), so `kill -TERM 1` does
//     nothing;
//   - the job's processes get oom_score_adj 1000, so the OOM killer takes
//     them before init;
//   - a watchdog ends the box when the worker is silent for the watchdog
//     period (heartbeats arrive every second), and EOF on the socket or on
//     the attached stdin ends it at once: no box outlives its worker by more
//     than the period, whatever the job holds open.
//
// For each command it:
//   - starts the command in its own process group with a clean environment;
//   - streams the first half of the output cap live and keeps the last half
//     as a tail, sent after the command in bounded chunks, counting every
//     byte;
//   - kills every process in the container (kill(-1, SIGKILL), which spares
//     only PID 1) on timeout, on an output flood, or when the pids cgroup
//     refuses a fork;
//   - after the command's main process exits, kills whatever it left behind
//     (background and setsid children), so one command never leaks into the
//     next and every pipe reaches EOF;
//   - reads the memory and pids cgroup counters before and after, so OOM
//     kills and pids exhaustion are reported from the kernel's own counters;
//   - reaps every zombie (it is the container's init).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/sandbox/initproto"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

type initProc struct {
	out   *os.File // the control connection
	outMu sync.Mutex

	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus

	lastHeard atomic.Int64 // unix nanoseconds of the worker's last frame
}

func main() {
	// First, before anything of the job can exist: out of its reach.
	sigs := protect()
	watchdog := watchdogPeriod(os.Args[1:])
	p := &initProc{waiters: map[int]chan syscall.WaitStatus{}}
	go p.handleSignals(sigs)
	lockText()
	reserveThreads(8)
	hello := initproto.Hello{Version: initproto.Version, PID: os.Getpid(), UID: os.Getuid()}
	hello.Bash, hello.Sh = p.prewarm()

	conn, err := dialControl()
	if err != nil {
		fmt.Fprintf(os.Stderr, "paddock-init: control socket: %v\n", err)
		os.Exit(3)
	}
	p.out = conn
	p.lastHeard.Store(time.Now().UnixNano())
	b, _ := json.Marshal(hello)
	p.send(initproto.TypeHello, b)

	go watchStdin()
	go p.watchdog(watchdog)
	// Frames are read while commands run, not only between them: EOF (the
	// worker went away) ends everything at once, even mid-command.
	frames := make(chan frame)
	go p.readFrames(conn, frames)
	for f := range frames {
		p.handle(f, frames)
	}
}

// watchdogPeriod returns the period given by the last valid
// initproto.WatchdogFlag in args (milliseconds, > 0), 5s by default.
func watchdogPeriod(args []string) time.Duration {
	watchdog := 5 * time.Second
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, initproto.WatchdogFlag); ok {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
				watchdog = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return watchdog
}

// handleSignals reaps on every SIGCHLD that protect catches and drops every
// other signal.
func (p *initProc) handleSignals(sigs <-chan os.Signal) {
	for s := range sigs {
		if s == syscall.SIGCHLD {
			p.reap()
		} // every other signal sent to init is dropped
	}
}

// watchStdin ends the box at the EOF of the attached stdin. It carries
// nothing; its EOF means the worker's end of the attach stream closed
// (worker gone, container being removed).
func watchStdin() {
	_, _ = io.Copy(io.Discard, os.Stdin)
	die(0)
}

// watchdog ends the box when the worker has been silent for the whole
// period. The worker sends a heartbeat every second; that much silence
// means it is hung or cut off, and the box must not go on without it.
func (p *initProc) watchdog(period time.Duration) {
	t := time.NewTicker(min(period/4, 250*time.Millisecond))
	defer t.Stop()
	for range t.C {
		if time.Since(time.Unix(0, p.lastHeard.Load())) > period {
			fmt.Fprintf(os.Stderr, "paddock-init: worker silent for %s: ending the box\n", period)
			die(4)
		}
	}
}

// readFrames reads the worker's frames from conn, notes when each arrived,
// drops heartbeats and hands every other frame to frames. Any read error
// ends the box; only one other than EOF (the worker went away) is logged.
func (p *initProc) readFrames(conn io.Reader, frames chan<- frame) {
	in := bufio.NewReaderSize(conn, 64<<10)
	for {
		typ, payload, err := initproto.ReadFrame(in, initproto.MaxPayload)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "paddock-init: %v\n", err)
			}
			die(0)
		}
		p.lastHeard.Store(time.Now().UnixNano())
		if typ == initproto.TypeHeartbeat {
			continue
		}
		frames <- frame{typ, payload}
	}
}

// handle answers one frame of the worker: a command runs and is answered
// with its tails and its exit, a probe with the facts, a put (which reads
// its data frames from frames) and a collect as files.go says; a bad
// request or an unknown frame ends the box.
func (p *initProc) handle(f frame, frames <-chan frame) {
	switch f.typ {
	case initproto.TypeRun:
		var req initproto.Request
		if err := json.Unmarshal(f.payload, &req); err != nil {
			fmt.Fprintf(os.Stderr, "paddock-init: bad request: %v\n", err)
			die(2)
		}
		exit, tails := p.run(req)
		p.sendTails(tails)
		b, _ := json.Marshal(exit)
		p.send(initproto.TypeExit, b)
	case initproto.TypeProbe:
		b, _ := json.Marshal(probe())
		p.send(initproto.TypeFacts, b)
	case initproto.TypePut:
		p.put(decodeFrame[initproto.Put](f), frames)
	case initproto.TypeCollect:
		p.collect(decodeFrame[initproto.Collect](f))
	default:
		fmt.Fprintf(os.Stderr, "paddock-init: unknown frame %q\n", f.typ)
		die(2)
	}
}

// sendTails sends the kept tails of stdout and stderr, in that order, in
// chunks of at most initproto.ChunkSize.
func (p *initProc) sendTails(tails [2][]byte) {
	for i, typ := range []byte{initproto.TypeTailOut, initproto.TypeTailErr} {
		for t := tails[i]; len(t) > 0; {
			n := min(len(t), initproto.ChunkSize)
			p.send(typ, t[:n])
			t = t[n:]
		}
	}
}

type frame struct {
	typ     byte
	payload []byte
}

// protect makes init non-dumpable and deaf to signals: it catches every
// signal and drops all but SIGCHLD (the kernel never delivers SIGKILL or
// SIGSTOP to a namespace's init from inside). Caught, not ignored: an
// ignored disposition would be inherited by the job's processes across
// exec, a caught one is reset to the default. Synchronous faults still
// reach the Go runtime: only sent signals are dropped.
func protect() chan os.Signal {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); e != 0 {
		fmt.Fprintf(os.Stderr, "paddock-init: prctl(PR_SET_DUMPABLE, 0): %v\n", e)
		os.Exit(3)
	}
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs)
	return sigs
}

// lockText locks init's own file-backed pages (its code and read-only
// data) in memory. A job thrashing at its memory limit makes the kernel
// evict every clean file page in the cgroup, init's code among them; init
// would then stall on page faults and look dead. Anonymous pages need no
// lock: the box has no swap. The mappings are ~2 MiB, within Docker's
// usual memlock limit (8 MiB, inherited from the engine; the worker sets
// none, so that a rootless engine need not raise a hard limit); failure
// only costs that protection.
func lockText() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != exe {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			continue
		}
		// Silent on failure: init's stderr is read as its last words
		// when a box dies (sandbox.Runtime.ended).
		if _, _, e := syscall.Syscall(syscall.SYS_MLOCK, uintptr(start), uintptr(end-start), 0); e != 0 {
			return
		}
	}
}

// dialControl connects to the worker's socket; the fd is non-blocking so
// reads and writes wait in the runtime's poller, not on a thread.
func dialControl() (*os.File, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	sa := &syscall.SockaddrUnix{Name: initproto.CtlSocket}
	for i := 0; ; i++ {
		err = syscall.Connect(fd, sa)
		if err == nil || i == 100 || (err != syscall.ENOENT && err != syscall.ECONNREFUSED && err != syscall.EINTR) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("connect %s: %w", initproto.CtlSocket, err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "control"), nil
}

// die kills every process of the box and exits.
func die(code int) {
	killAll()
	os.Exit(code)
}

func (p *initProc) send(typ byte, payload []byte) {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	if err := initproto.WriteFrame(p.out, typ, payload); err != nil {
		// The worker is gone: nothing can be reported any more.
		die(0)
	}
}

// reap collects every exited child; the status of a watched pid is handed to
// its waiter, all others (orphans re-parented to PID 1) are discarded.
func (p *initProc) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		p.mu.Lock()
		ch := p.waiters[pid]
		delete(p.waiters, pid)
		p.mu.Unlock()
		if ch != nil {
			ch <- ws
		}
	}
}

type stream struct {
	headLeft int64
	typ      byte
	tail     *initproto.Tail
	total    int64
	spill    *spillFile // nil: not spilled
}

// run runs one command and returns how it ended and the kept tails.
func (p *initProc) run(req initproto.Request) (initproto.Exit, [2][]byte) {
	start := time.Now()
	exit := initproto.Exit{ID: req.ID, ExitCode: -1}
	var tails [2][]byte
	oom0, pids0 := cgroupCounters()

	path, err := req.Path, error(nil)
	if path == "" {
		path, err = lookPath(req.Argv, req.Env)
	}
	if err != nil {
		exit.ExitCode, exit.StartErr = 127, err.Error()
		exit.DurationNS = int64(time.Since(start))
		return exit, tails
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		exit.ExitCode, exit.StartErr = 126, err.Error()
		return exit, tails
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		exit.ExitCode, exit.StartErr = 126, err.Error()
		return exit, tails
	}
	pid, done, err := p.start(path, req, outW, errW)
	if err != nil {
		outR.Close()
		errR.Close()
		exit.ExitCode, exit.StartErr = 126, err.Error()
		if errors.Is(err, os.ErrNotExist) {
			exit.ExitCode = 127
		}
		exit.DurationNS = int64(time.Since(start))
		return exit, tails
	}

	c := newCommand(p, pid, req, outR, errR)
	c.openSpills(req, &exit)
	c.pumpsDone.Add(2)
	go c.pump(outR, c.streams[0])
	go c.pump(errR, c.streams[1])
	ws := c.wait(done, req.TimeoutMS, pids0)
	// The main process is gone; kill what it left behind so every pipe
	// closes and nothing survives into the next command.
	exit.Leftover = killLeftovers()
	// Every writer is dead, so the pumps reach EOF; if a process the
	// kernel cannot kill yet still holds a pipe, stop reading anyway.
	c.drain()

	c.recordKill(&exit)
	switch {
	case ws.Exited():
		exit.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		exit.ExitCode, exit.Signal = -1, int(ws.Signal())
	}
	oom1, pids1 := cgroupCounters()
	exit.OOMKills, exit.PidsMax = max(oom1-oom0, 0), max(pids1-pids0, 0)
	exit.StdoutBytes, exit.StderrBytes = c.streams[0].total, c.streams[1].total
	c.closeSpills(&exit)
	tails[0], tails[1] = c.streams[0].tail.Bytes(), c.streams[1].tail.Bytes()
	exit.DurationNS = int64(time.Since(start))
	return exit, tails
}

// start starts the command at path in its own process group, with
// /dev/null as stdin and outW and errW as stdout and stderr, and closes
// init's copies of those three. On success it returns the pid, already
// demoted, and the channel its wait status arrives on.
func (p *initProc) start(path string, req initproto.Request, outW, errW *os.File) (int, chan syscall.WaitStatus, error) {
	stdin, feed := commandStdin(req.Stdin)
	dir := req.Dir
	if dir == "" {
		dir = "/"
	}

	done := make(chan syscall.WaitStatus, 1)
	// Hold the waiters lock across the start so the reaper cannot collect
	// the child before its waiter is registered.
	p.mu.Lock()
	proc, err := os.StartProcess(path, req.Argv, &os.ProcAttr{
		Dir: dir, Env: req.Env, Files: []*os.File{stdin, outW, errW},
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err == nil {
		p.waiters[proc.Pid] = done
	}
	p.mu.Unlock()
	outW.Close()
	errW.Close()
	if stdin != nil {
		stdin.Close()
	}
	if err != nil {
		if feed != nil {
			feed.Close()
		}
		return 0, nil, err
	}
	if feed != nil {
		// Written while the command runs; a command that never reads it
		// ends, and the write fails with EPIPE once every reader is gone.
		go func() { _, _ = feed.Write(req.Stdin); feed.Close() }()
	}
	pid := proc.Pid
	_ = proc.Release()
	demote(pid)
	p.reap() // in case SIGCHLD fired before the waiter existed
	return pid, done, nil
}

// commandStdin returns the command's stdin: /dev/null, or the read end of a
// pipe whose write end (feed) is to be given data.
func commandStdin(data []byte) (stdin, feed *os.File) {
	if len(data) == 0 {
		stdin, _ = os.Open(os.DevNull)
		return stdin, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		stdin, _ = os.Open(os.DevNull)
		return stdin, nil
	}
	return r, w
}

// limiter bounds the bytes a command's pumps read per second (both
// streams together) by sleeping in the pump: the command then blocks on its
// writes. At most one second of idle time is banked as credit.
type limiter struct {
	mu    sync.Mutex
	rate  int64
	start time.Time
	sent  int64
}

func (l *limiter) wait(n int) {
	if l == nil || l.rate <= 0 {
		return
	}
	l.mu.Lock()
	now := time.Now()
	if credit := now.Sub(l.start) - time.Duration(float64(l.sent)/float64(l.rate)*float64(time.Second)); credit > time.Second {
		l.start, l.sent = now.Add(-time.Second), 0
	}
	l.sent += int64(n)
	due := l.start.Add(time.Duration(float64(l.sent) / float64(l.rate) * float64(time.Second)))
	l.mu.Unlock()
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}

// command is one started command: its process group, the read ends of its
// output pipes with the pumps that read them, and why init killed it, if
// it did.
type command struct {
	p          *initProc
	pid        int
	outputKill int64 // req.OutputKill
	streamAll  bool  // req.StreamAll: every byte is sent live, no tail kept
	rate       *limiter
	outR, errR *os.File
	streams    [2]*stream

	killOnce  sync.Once
	killed    chan string
	totalOut  atomic.Int64
	pumpsDone sync.WaitGroup
}

func newCommand(p *initProc, pid int, req initproto.Request, outR, errR *os.File) *command {
	capHalf := req.OutputCap / 2
	tailN := int(req.OutputCap - capHalf)
	if req.StreamAll {
		tailN = 0 // the worker keeps the tail
	}
	return &command{
		p: p, pid: pid, outputKill: req.OutputKill, outR: outR, errR: errR,
		streamAll: req.StreamAll, rate: &limiter{rate: req.RateBytes, start: time.Now()},
		streams: [2]*stream{
			{typ: initproto.TypeStdout, headLeft: capHalf, tail: initproto.NewTail(tailN)},
			{typ: initproto.TypeStderr, headLeft: capHalf, tail: initproto.NewTail(tailN)},
		},
		killed: make(chan string, 1),
	}
}

// kill kills the command's process group and every other process but
// init, the first time only, and records why.
func (c *command) kill(why string) {
	c.killOnce.Do(func() {
		c.killed <- why
		_ = syscall.Kill(-c.pid, syscall.SIGKILL)
		killAll()
	})
}

// pump reads r until it fails: the head of s is sent live, the rest kept in
// its tail, and every byte counted; output beyond the kill limit, if any
// (both streams together), kills the command.
func (c *command) pump(r *os.File, s *stream) {
	defer c.pumpsDone.Done()
	buf := make([]byte, initproto.ChunkSize)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			s.total += int64(n)
			s.spill.write(chunk)
			if c.streamAll {
				c.p.send(s.typ, chunk)
				chunk = nil
				c.rate.wait(n)
			}
			if s.headLeft > 0 && len(chunk) > 0 {
				h := min(int64(len(chunk)), s.headLeft)
				c.p.send(s.typ, chunk[:h])
				s.headLeft -= h
				chunk = chunk[h:]
			}
			if len(chunk) > 0 {
				_, _ = s.tail.Write(chunk)
			}
			if t := c.totalOut.Add(int64(n)); c.outputKill > 0 && t > c.outputKill {
				c.kill("output")
			}
		}
		if err != nil {
			return
		}
	}
}

// wait returns the wait status of the command's main process, from done.
// Meanwhile it kills the command when the timeout (30s when none) passes
// or when the pids cgroup has refused a fork since pids0.
func (c *command) wait(done <-chan syscall.WaitStatus, timeoutMS, pids0 int64) syscall.WaitStatus {
	timeout := time.Duration(timeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	pidsTick := time.NewTicker(20 * time.Millisecond)
	defer pidsTick.Stop()

	for {
		select {
		case ws := <-done:
			return ws
		case <-timer.C:
			c.kill("timeout")
		case <-pidsTick.C:
			// Whatever forked before demote reached it: the group again.
			_ = syscall.Setpriority(syscall.PRIO_PGRP, c.pid, jobNice)
			if _, pids := cgroupCounters(); pids > pids0 {
				c.kill("pids")
			}
		}
	}
}

// drain waits for both pumps to finish, closing the read ends under them
// if they have not within 2s, and then closes the read ends.
func (c *command) drain() {
	pumped := make(chan struct{})
	go func() { c.pumpsDone.Wait(); close(pumped) }()
	select {
	case <-pumped:
	case <-time.After(2 * time.Second):
		c.outR.Close()
		c.errR.Close()
		<-pumped
	}
	c.outR.Close()
	c.errR.Close()
}

// recordKill marks in exit why init killed the command, if it did.
func (c *command) recordKill(exit *initproto.Exit) {
	select {
	case why := <-c.killed:
		switch why {
		case "timeout":
			exit.TimedOut = true
		case "output":
			exit.OutputKilled = true
		case "pids":
			exit.PidsKilled = true
		}
	default:
	}
}

// jobNice is the nice value of every job process. Inside the box's CPU
// cgroup only relative weights count, so the job loses nothing against its
// own processes, but init (nice 0) keeps about 12% of the box's CPU even
// against 500 spinning processes: it still answers its worker, notices a
// refused fork and enforces timeouts under a fork bomb. The box cannot
// undo it: lowering a nice value needs CAP_SYS_NICE or RLIMIT_NICE.
const jobNice = 19

// demote makes a job process yield to init: nice 19 and oom_score_adj
// 1000 (the OOM killer takes job processes before init). Raising either
// needs no privilege, and children inherit both at fork.
func demote(pid int) {
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, pid, jobNice)
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
}

// killAll sends SIGKILL to every process init may signal but itself.
func killAll() { _ = syscall.Kill(-1, syscall.SIGKILL) }

// killLeftovers kills every process but init until none is left, and
// returns how many there were at first.
func killLeftovers() int {
	first := len(otherPids())
	if first == 0 {
		return 0
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(otherPids()) > 0 && time.Now().Before(deadline) {
		killAll()
		time.Sleep(time.Millisecond)
	}
	return first
}

// otherPids lists the live processes of the container other than init
// (zombies count until reaped).
func otherPids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func lookPath(argv, env []string) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", errors.New("empty argv")
	}
	name := argv[0]
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", name)
}

// cgroupCounters reads the OOM-kill and pids-refusal counters of the
// container's own cgroup (v1 or v2 layout); 0 when unreadable.
func cgroupCounters() (oomKills, pidsMax int64) {
	oomKills = oomFile.readKey("oom_kill")
	pidsMax = pidsFile.readKey("max")
	return max(oomKills, 0), max(pidsMax, 0)
}

// counterFile is a cgroup file opened once and re-read from offset 0.
type counterFile struct {
	once  sync.Once
	paths []string
	f     *os.File
	buf   [4096]byte
}

var (
	oomFile  = &counterFile{paths: []string{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"}}
	pidsFile = &counterFile{paths: []string{"/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events"}}
)

func (c *counterFile) readKey(key string) int64 {
	c.once.Do(func() {
		for _, p := range c.paths {
			if f, err := os.Open(p); err == nil {
				c.f = f
				return
			}
		}
	})
	if c.f == nil {
		return -1
	}
	n, err := c.f.ReadAt(c.buf[:], 0)
	if n == 0 && err != nil {
		return -1
	}
	for _, line := range strings.Split(string(c.buf[:n]), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return -1
}

// prewarm runs the image's shells once before init says hello, so the first
// real command does not pay for the first fork/exec of this process and the
// first lookups in this container's fresh overlay mount, and returns the
// paths of bash and sh that ran. In a pooled container this happens off the
// critical path.
func (p *initProc) prewarm() (bash, sh string) {
	env := []string{"PATH=" + defaultPath}
	for _, name := range []string{"sh", "bash"} {
		path, err := lookPath([]string{name}, env)
		if err != nil {
			continue
		}
		if x, _ := p.run(initproto.Request{Argv: []string{path, "-c", ":"}, Env: env, Dir: "/", TimeoutMS: 5000}); x.ExitCode != 0 {
			continue
		}
		if name == "bash" {
			bash = path
		} else {
			sh = path
		}
	}
	return bash, sh
}

// reserveThreads makes the Go runtime start n OS threads now, while the
// container is empty. Threads count against the pids cgroup: a runtime
// that must clone a thread while a fork bomb holds every pid aborts, and
// with it PID 1. Idle threads are kept by the runtime and reused, so init
// never needs a new one later.
func reserveThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A blocking syscall holds its thread; the scheduler starts
			// another for the goroutines that are still runnable.
			ts := syscall.Timespec{Nsec: 20_000_000}
			_ = syscall.Nanosleep(&ts, nil)
		}()
	}
	wg.Wait()
}
