// Command paddock-init is PID 1 of every Paddock sandbox container. It is
// bind-mounted read-only at /.paddock/init and speaks the framed protocol of
// package initproto over its stdin and stdout, which the worker holds through
// the Docker attach stream.
//
// For each command it:
//   - starts the command in its own process group with a clean environment;
//   - streams the first half of the output cap live and keeps the last half
//     as a tail, counting every byte;
//   - kills every process in the container (kill(-1, SIGKILL), which spares
//     only PID 1) on timeout, on an output flood, or when the pids cgroup
//     refuses a fork;
//   - after the command's main process exits, kills whatever it left behind
//     (background and setsid children), so one command never leaks into the
//     next and every pipe reaches EOF;
//   - reads the memory and pids cgroup counters before and after, so OOM
//     kills and pids exhaustion are reported from the kernel's own counters;
//   - reaps every zombie (it is the container's init).
//
// When stdin reaches EOF (the worker went away), also in the middle of a
// command, or SIGTERM arrives, it kills every process and exits, so the
// container ends even if its owner crashed.
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
	"syscall"
	"time"

	"github.com/paddockhq/paddock/sandbox/initproto"
)

type initProc struct {
	out   *os.File
	outMu sync.Mutex

	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
}

func main() {
	p := &initProc{out: os.Stdout, waiters: map[int]chan syscall.WaitStatus{}}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			if s == syscall.SIGCHLD {
				p.reap()
				continue
			}
			killAll()
			os.Exit(143)
		}
	}()
	reserveThreads(8)
	p.prewarm()
	hello, _ := json.Marshal(initproto.Hello{Version: initproto.Version, PID: os.Getpid(), UID: os.Getuid()})
	p.send(initproto.TypeHello, hello)

	// stdin is read while commands run, not only between them: when the
	// worker goes away (kill -9, lost host) its end of the attach stream
	// closes and init ends everything at once, even in the middle of a
	// command, so an orphaned job never keeps running next to its re-run.
	type frame struct {
		typ     byte
		payload []byte
	}
	frames := make(chan frame)
	go func() {
		in := bufio.NewReaderSize(os.Stdin, 64<<10)
		for {
			typ, payload, err := initproto.ReadFrame(in)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					fmt.Fprintf(os.Stderr, "paddock-init: %v\n", err)
				}
				killAll()
				os.Exit(0)
			}
			frames <- frame{typ, payload}
		}
	}()
	for f := range frames {
		typ, payload := f.typ, f.payload
		switch typ {
		case initproto.TypeRun:
			var req initproto.Request
			if err := json.Unmarshal(payload, &req); err != nil {
				fmt.Fprintf(os.Stderr, "paddock-init: bad request: %v\n", err)
				killAll()
				os.Exit(2)
			}
			exit := p.run(req)
			b, _ := json.Marshal(exit)
			p.send(initproto.TypeExit, b)
		case initproto.TypeProbe:
			b, _ := json.Marshal(probe())
			p.send(initproto.TypeFacts, b)
		default:
			fmt.Fprintf(os.Stderr, "paddock-init: unknown frame %q\n", typ)
			killAll()
			os.Exit(2)
		}
	}
}

func (p *initProc) send(typ byte, payload []byte) {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	if err := initproto.WriteFrame(p.out, typ, payload); err != nil {
		// The worker is gone: nothing can be reported any more.
		killAll()
		os.Exit(0)
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
	typ      byte
	headLeft int64
	tail     *initproto.Tail
	total    int64
}

func (p *initProc) run(req initproto.Request) initproto.Exit {
	start := time.Now()
	exit := initproto.Exit{ID: req.ID, ExitCode: -1}
	oom0, pids0 := cgroupCounters()

	path, err := lookPath(req.Argv, req.Env)
	if err != nil {
		exit.ExitCode, exit.StartErr = 127, err.Error()
		exit.DurationNS = int64(time.Since(start))
		return exit
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		exit.ExitCode, exit.StartErr = 126, err.Error()
		return exit
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		exit.ExitCode, exit.StartErr = 126, err.Error()
		return exit
	}
	devnull, _ := os.Open(os.DevNull)
	dir := req.Dir
	if dir == "" {
		dir = "/"
	}

	done := make(chan syscall.WaitStatus, 1)
	// Hold the waiters lock across the start so the reaper cannot collect
	// the child before its waiter is registered.
	p.mu.Lock()
	proc, err := os.StartProcess(path, req.Argv, &os.ProcAttr{
		Dir: dir, Env: req.Env, Files: []*os.File{devnull, outW, errW},
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err == nil {
		p.waiters[proc.Pid] = done
	}
	p.mu.Unlock()
	outW.Close()
	errW.Close()
	if devnull != nil {
		devnull.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		exit.ExitCode, exit.StartErr = 126, err.Error()
		if errors.Is(err, os.ErrNotExist) {
			exit.ExitCode = 127
		}
		exit.DurationNS = int64(time.Since(start))
		return exit
	}
	pid := proc.Pid
	_ = proc.Release()
	p.reap() // in case SIGCHLD fired before the waiter existed

	capHalf := req.OutputCap / 2
	streams := [2]*stream{
		{typ: initproto.TypeStdout, headLeft: capHalf, tail: initproto.NewTail(int(req.OutputCap - capHalf))},
		{typ: initproto.TypeStderr, headLeft: capHalf, tail: initproto.NewTail(int(req.OutputCap - capHalf))},
	}
	var (
		killOnce  sync.Once
		killed    = make(chan string, 1)
		totalMu   sync.Mutex
		totalOut  int64
		pumpsDone sync.WaitGroup
	)
	kill := func(why string) {
		killOnce.Do(func() {
			killed <- why
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			killAll()
		})
	}
	pump := func(r *os.File, s *stream) {
		defer pumpsDone.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				s.total += int64(n)
				if s.headLeft > 0 {
					h := min(int64(len(chunk)), s.headLeft)
					p.send(s.typ, chunk[:h])
					s.headLeft -= h
					chunk = chunk[h:]
				}
				if len(chunk) > 0 {
					_, _ = s.tail.Write(chunk)
				}
				totalMu.Lock()
				totalOut += int64(n)
				over := req.OutputKill > 0 && totalOut > req.OutputKill
				totalMu.Unlock()
				if over {
					kill("output")
				}
			}
			if err != nil {
				return
			}
		}
	}
	pumpsDone.Add(2)
	go pump(outR, streams[0])
	go pump(errR, streams[1])

	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	pidsTick := time.NewTicker(20 * time.Millisecond)
	defer pidsTick.Stop()

	var ws syscall.WaitStatus
wait:
	for {
		select {
		case ws = <-done:
			break wait
		case <-timer.C:
			kill("timeout")
		case <-pidsTick.C:
			if _, pids := cgroupCounters(); pids > pids0 {
				kill("pids")
			}
		}
	}
	// The main process is gone; kill what it left behind so every pipe
	// closes and nothing survives into the next command.
	exit.Leftover = killLeftovers()
	pumpsDone.Wait()

	select {
	case why := <-killed:
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
	switch {
	case ws.Exited():
		exit.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		exit.ExitCode, exit.Signal = -1, int(ws.Signal())
	}
	oom1, pids1 := cgroupCounters()
	exit.OOMKills, exit.PidsMax = max(oom1-oom0, 0), max(pids1-pids0, 0)
	exit.StdoutBytes, exit.StderrBytes = streams[0].total, streams[1].total
	exit.StdoutTail, exit.StderrTail = streams[0].tail.Bytes(), streams[1].tail.Bytes()
	exit.DurationNS = int64(time.Since(start))
	return exit
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
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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

// readKey returns the value of "key N" in a cgroup flat-keyed file, -1 if absent.
func readKey(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return -1
}

func readInt(paths ...string) int64 {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return -1
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	}
	return -1
}

func probe() initproto.Facts {
	f := initproto.Facts{UID: os.Getuid(), Env: os.Environ()}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch k {
			case "NoNewPrivs":
				f.NoNewPrivs = v
			case "CapEff":
				f.CapEff = v
			case "Seccomp":
				f.Seccomp = v
			}
		}
	}
	f.RootWritable = canCreate("/.paddock-probe")
	f.TmpWritable = canCreate("/tmp/.paddock-probe")
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			f.Interfaces = append(f.Interfaces, e.Name())
		}
	}
	f.MemoryLimit = readInt("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max")
	f.PidsLimit = readInt("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max")
	_, err := os.Stat("/sys/fs/cgroup/pids/pids.events")
	_, err2 := os.Stat("/sys/fs/cgroup/pids.events")
	f.CgroupReadable = err == nil || err2 == nil
	return f
}

func canCreate(path string) bool {
	fd, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	fd.Close()
	os.Remove(path)
	return true
}

// prewarm runs the image's shells once before init says hello, so the first
// real command does not pay for the first fork/exec of this process and the
// first lookups in this container's fresh overlay mount. In a pooled
// container this happens off the critical path.
func (p *initProc) prewarm() {
	for _, sh := range []string{"sh", "bash"} {
		p.run(initproto.Request{Argv: []string{sh, "-c", ":"}, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Dir: "/", TimeoutMS: 5000})
	}
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
