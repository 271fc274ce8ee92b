package locks_test

// Tests that need several real processes: a flock dies with its process, a
// stopped process keeps it, and only separate processes show that the
// locks exclude each other across address spaces. The test binary re-executes
// itself as the helper (TestMain dispatches on helperEnv), so no extra binary
// is built.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/locks"
)

// Helper process environment.
const (
	helperEnv  = "PADDOCK_LOCKS_HELPER" // the helper mode: "counter" or "hold"
	envRedis   = "PADDOCK_LOCKS_REDIS"  // redis unix socket
	envPrefix  = "PADDOCK_LOCKS_PREFIX"
	envRoot    = "PADDOCK_LOCKS_ROOT"
	envLockDir = "PADDOCK_LOCKS_LOCKDIR"
	envName    = "PADDOCK_LOCKS_NAME"
	envTTL     = "PADDOCK_LOCKS_TTL"
	envWait    = "PADDOCK_LOCKS_WAIT"
	envIter    = "PADDOCK_LOCKS_ITER"
)

// runHelper is the helper process's main.
func runHelper(mode string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rdb := redis.NewClient(redisOptions(os.Getenv(envRedis)))
	defer rdb.Close()
	leaser, err := locks.NewLeaser(rdb, locks.LeaseConfig{Prefix: os.Getenv(envPrefix), PollMax: 20 * time.Millisecond, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	wait, _ := time.ParseDuration(os.Getenv(envWait))
	g, err := locks.NewGuard(leaser, locks.GuardConfig{Root: os.Getenv(envRoot), LockDir: os.Getenv(envLockDir),
		LeaseTTL: ttl, Wait: wait, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	name := os.Getenv(envName)
	switch mode {
	case "counter":
		iter, _ := strconv.Atoi(os.Getenv(envIter))
		return helperCounter(g, name, iter)
	case "hold":
		return helperHold(g, name)
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}

// helperCounter increments <volume>/counter iter times, each time holding
// the volume RW: a read-modify-write that loses updates unless the Guard
// excludes the other processes. An O_EXCL marker file catches an overlap
// directly, and tokens.log records the fencing token of each turn.
func helperCounter(g *locks.Guard, name string, iter int) int {
	ctx := context.Background()
	for range iter {
		h, err := g.Acquire(ctx, name, locks.RW)
		if err != nil {
			fmt.Fprintln(os.Stderr, "acquire:", err)
			return 1
		}
		if err := criticalSection(h); err != nil {
			fmt.Fprintln(os.Stderr, err)
			h.Release()
			return 1
		}
		if err := h.Release(); err != nil {
			fmt.Fprintln(os.Stderr, "release:", err)
			return 1
		}
	}
	fmt.Println("done")
	return 0
}

func criticalSection(h *locks.Held) error {
	marker := filepath.Join(h.Dir(), "inside")
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("overlap: another holder is inside: %w", err)
	}
	f.Close()
	counter := filepath.Join(h.Dir(), "counter")
	n := 0
	if b, err := os.ReadFile(counter); err == nil {
		if n, err = strconv.Atoi(string(b)); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// sleep: widens the read-modify-write window two holders at once would lose an update in.
	time.Sleep(time.Millisecond)
	if err := os.WriteFile(counter, []byte(strconv.Itoa(n+1)), 0o644); err != nil {
		return err
	}
	tokens, err := os.OpenFile(filepath.Join(h.Dir(), "tokens.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintln(tokens, h.FencingToken())
	tokens.Close()
	return os.Remove(marker)
}

// helperHold acquires the volume RW, prints "held token=N", then obeys
// commands on stdin, one per line:
//
//	write X   fenced write of X to <volume>/data: "write ok" or "write stale token=T highest=H"
//	lost      wait for the lease to be lost: "lost leaselost=true <err>"
//	release   "released" or "released notheld"
//
// It releases and exits at EOF.
func helperHold(g *locks.Guard, name string) int {
	ctx := context.Background()
	h, err := g.Acquire(ctx, name, locks.RW)
	if err != nil {
		var te *locks.TimeoutError
		if errors.As(err, &te) {
			fmt.Printf("error %s %v\n", te.Lock, err)
		} else {
			fmt.Printf("error other %v\n", err)
		}
		return 3
	}
	defer h.Release()
	fmt.Printf("held token=%d\n", h.FencingToken())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "write":
			err := h.FencedWrite(ctx, func() error {
				return os.WriteFile(filepath.Join(h.Dir(), "data"), []byte(arg), 0o644)
			})
			var se *locks.StaleTokenError
			switch {
			case err == nil:
				fmt.Println("write ok")
			case errors.As(err, &se):
				fmt.Printf("write stale token=%d highest=%d\n", se.Token, se.Highest)
			default:
				fmt.Printf("write error %v\n", err)
			}
		case "lost":
			select {
			case <-h.Lost():
				fmt.Printf("lost leaselost=%t %v\n", errors.Is(h.Err(), locks.ErrLeaseLost), h.Err())
			case <-time.After(30 * time.Second):
				fmt.Println("lost timeout")
			}
		case "release":
			switch err := h.Release(); {
			case err == nil:
				fmt.Println("released")
			case errors.Is(err, locks.ErrNotHeld):
				fmt.Println("released notheld")
			default:
				fmt.Printf("released error %v\n", err)
			}
		}
	}
	return 0
}

// proc is a running helper process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr syncBuffer
	exited chan struct{}
	err    error // of Wait; read after exited is closed
}

func startHelper(t *testing.T, s *setup, mode string, env ...string) *proc {
	t.Helper()
	p := &proc{t: t, lines: make(chan string, 1024), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), helperEnv+"="+mode, envRedis+"="+s.redis.Addr, envPrefix+"="+s.prefix)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout = &lineWriter{ch: p.lines}
	p.cmd.Stderr = &p.stderr
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		p.cmd.Process.Kill() // also ends a stopped process
		<-p.exited
		if t.Failed() {
			t.Logf("helper %d (%s) stderr:\n%s", p.cmd.Process.Pid, mode, p.stderr.String())
		}
	})
	return p
}

func (p *proc) send(line string) {
	p.t.Helper()
	_, err := io.WriteString(p.stdin, line+"\n")
	require.NoError(p.t, err)
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
}

// expect returns the next output line starting with prefix, skipping others.
func (p *proc) expect(prefix string, within time.Duration) string {
	p.t.Helper()
	timeout := time.After(within)
	for {
		select {
		case line := <-p.lines:
			if strings.HasPrefix(line, prefix) {
				return line
			}
			p.t.Logf("helper %d: %s", p.cmd.Process.Pid, line)
		case <-p.exited:
			select {
			case line := <-p.lines:
				if strings.HasPrefix(line, prefix) {
					return line
				}
				continue
			default:
			}
			p.t.Fatalf("helper exited (%v) before printing %q; stderr:\n%s", p.err, prefix, p.stderr.String())
		case <-timeout:
			p.t.Fatalf("helper printed no %q within %s; stderr:\n%s", prefix, within, p.stderr.String())
		}
	}
}

// wait waits for the process to exit and returns Wait's error.
func (p *proc) wait(within time.Duration) error {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(within):
		p.t.Fatalf("helper did not exit within %s", within)
		return nil
	}
}

// heldToken parses "held token=N".
func heldToken(t *testing.T, line string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimPrefix(line, "held token="), 10, 64)
	require.NoError(t, err, line)
	return n
}

type lineWriter struct {
	buf []byte
	ch  chan string
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		w.ch <- string(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// N processes × M read-modify-write increments of one counter file, each
// under Guard.Acquire(RW): no update is lost, no two holders overlap, and
// the fencing tokens follow the order of the critical sections.
func TestProcessMutualExclusion(t *testing.T) {
	t.Parallel()
	const n, m = 4, 50
	s := newSetup(t)
	root := t.TempDir()
	var procs []*proc
	for range n {
		procs = append(procs, startHelper(t, s, "counter", envRoot+"="+root, envName+"=shared",
			envTTL+"=10s", envWait+"=5m", envIter+"="+strconv.Itoa(m)))
	}
	for _, p := range procs {
		p.expect("done", 5*time.Minute)
		require.NoError(t, p.wait(time.Minute), p.stderr.String())
	}

	b, err := os.ReadFile(filepath.Join(root, "shared", "counter"))
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(n*m), string(b))

	b, err = os.ReadFile(filepath.Join(root, "shared", "tokens.log"))
	require.NoError(t, err)
	lines := strings.Fields(string(b))
	require.Len(t, lines, n*m)
	prev := int64(0)
	for _, l := range lines {
		tok, err := strconv.ParseInt(l, 10, 64)
		require.NoError(t, err)
		require.Greater(t, tok, prev, "fencing tokens increase in lock order")
		prev = tok
	}
	highest, err := locks.ReadFence(context.Background(), filepath.Join(root, ".locks", "shared.fence"))
	require.NoError(t, err)
	assert.Equal(t, prev, highest)
}

// A holder killed with SIGKILL: the kernel frees its flock at once; its
// lease lives on until the ttl runs out (nobody released it), then the next
// holder gets the volume with a higher fencing token.
func TestProcessKilledHolder(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	root := t.TempDir()
	ctx := context.Background()
	p := startHelper(t, s, "hold", envRoot+"="+root, envName+"=vol", envTTL+"=3s", envWait+"=1m")
	t1 := heldToken(t, p.expect("held ", time.Minute))

	p.signal(syscall.SIGKILL)
	require.Error(t, p.wait(time.Minute))

	lockPath := filepath.Join(root, ".locks", "vol.lock")
	fl, err := locks.AcquireFile(ctx, lockPath, locks.FileOptions{Timeout: locks.NoWait})
	require.NoError(t, err, "the dead holder's flock is free at once")
	require.NoError(t, fl.Release())

	_, err = s.leaser.Obtain(ctx, "volume:vol", time.Second, 0)
	require.ErrorIs(t, err, locks.ErrNotObtained, "the dead holder's lease outlives it until its ttl")

	g := s.guard(t, locks.GuardConfig{Root: root, LeaseTTL: 3 * time.Second, Wait: time.Minute})
	h, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	assert.Greater(t, h.FencingToken(), t1)
	assert.Positive(t, h.Waited())
	require.NoError(t, h.Release())
}

// A holder stopped (SIGSTOP) past its ttl, with the next holder on another
// host (simulated by a separate lock directory: flock does not reach across
// hosts, the lease and the fence do). The next holder takes over; when the
// stopped one resumes (SIGCONT), its write is rejected by the fencing check
// and it learns that its lease is lost.
func TestProcessPausedHolderIsFenced(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	root := t.TempDir()
	p1 := startHelper(t, s, "hold", envRoot+"="+root, envLockDir+"="+t.TempDir(), envName+"=vol",
		envTTL+"=500ms", envWait+"=1m")
	t1 := heldToken(t, p1.expect("held ", time.Minute))
	p1.send("write A")
	p1.expect("write ok", time.Minute)

	p1.signal(syscall.SIGSTOP)
	eventually(t, time.Minute, func() bool { return s.leaseOwner(t, "volume:vol") == "" },
		"the stopped holder's lease expired")

	p2 := startHelper(t, s, "hold", envRoot+"="+root, envLockDir+"="+t.TempDir(), envName+"=vol",
		envTTL+"=5s", envWait+"=1m")
	t2 := heldToken(t, p2.expect("held ", time.Minute))
	require.Greater(t, t2, t1)
	p2.send("write B")
	p2.expect("write ok", time.Minute)
	p2.send("release")
	p2.expect("released", time.Minute)
	p2.stdin.Close()
	require.NoError(t, p2.wait(time.Minute))

	p1.signal(syscall.SIGCONT)
	p1.send("write A2")
	assert.Equal(t, fmt.Sprintf("write stale token=%d highest=%d", t1, t2), p1.expect("write ", time.Minute))
	p1.send("lost")
	assert.Contains(t, p1.expect("lost", time.Minute), "lost leaselost=true")
	p1.send("release")
	assert.Equal(t, "released notheld", p1.expect("released", time.Minute))

	b, err := os.ReadFile(filepath.Join(root, "vol", "data"))
	require.NoError(t, err)
	assert.Equal(t, "B", string(b), "the stale write did not land")
}

// The same pause on one host: the stopped process keeps its flock, so the
// next acquirer gets the expired lease but not the flock; it hands the lease
// back and times out on the flock. The resumed holder learns it lost the
// lease, and once it lets go the volume is free again.
func TestProcessPausedHolderKeepsFlock(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	root := t.TempDir()
	ctx := context.Background()
	p1 := startHelper(t, s, "hold", envRoot+"="+root, envName+"=vol", envTTL+"=500ms", envWait+"=1m")
	t1 := heldToken(t, p1.expect("held ", time.Minute))

	p1.signal(syscall.SIGSTOP)
	eventually(t, time.Minute, func() bool { return s.leaseOwner(t, "volume:vol") == "" },
		"the stopped holder's lease expired")

	g := s.guard(t, locks.GuardConfig{Root: root, LeaseTTL: 5 * time.Second, Wait: time.Second})
	_, err := g.Acquire(ctx, "vol", locks.RW)
	require.ErrorIs(t, err, locks.ErrNotObtained)
	var te *locks.TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "flock", te.Lock)
	assert.Empty(t, s.leaseOwner(t, "volume:vol"), "the lease was handed back")

	p1.signal(syscall.SIGCONT)
	p1.send("lost")
	assert.Contains(t, p1.expect("lost", time.Minute), "lost leaselost=true")
	p1.send("release")
	p1.expect("released", time.Minute)

	g = s.guard(t, locks.GuardConfig{Root: root, LeaseTTL: 5 * time.Second, Wait: time.Minute})
	h, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	assert.Greater(t, h.FencingToken(), t1)
	require.NoError(t, h.Release())
}
