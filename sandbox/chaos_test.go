package sandbox

// The chaos suite: hostile commands against real Docker. Each test asserts
// the one expected reason, that no container of the job survives, and that
// a control job (`echo ok` in another session of the same runtime) run
// alongside stays within a bounded ratio of its quiet latency.
//
// Control bound. Before the chaos, the control session runs `echo ok` once to
// warm up and then 5 times; the median is the quiet latency q. While a chaos
// command runs, the control job runs every 20 ms; the median under chaos
// must be ≤ max(20×q, q+2 s). On 2 cores q is 2–10 ms (more under -race),
// so the bound is about 2 s: it catches a chaos job that starves the host
// or the worker (a fork bomb that is not contained, an output flood the
// worker has to chew through) without being a wall-clock bound on a shared,
// noisy machine. Every control run must also end ok with "ok".
//
// Only the 1 GiB unkilled flood is skipped by -short.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// chaosCanary is a secret in the test process's (the worker's) environment;
// it must never reach a container, an output, an inspect or a log.
var chaosCanary = func() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	v := "canary-" + hex.EncodeToString(b)
	if err := os.Setenv("PADDOCK_CHAOS_CANARY", v); err != nil {
		panic(err)
	}
	return v
}()

// deflt is the operator's default profile (README, Sandbox defaults) on the test image.
var deflt = Profile{Image: testsvc.TestImage}

const controlEvery = 20 * time.Millisecond

type chaos struct {
	*setup
	ctl   *Session
	quiet time.Duration
	logs  *syncBuffer
}

// newChaos starts a runtime (no warm pool: every container is cold, so the
// runtime owns exactly the job's and the control's), opens the control
// session and measures its quiet latency.
func newChaos(t *testing.T, mod func(*Config)) *chaos {
	t.Helper()
	logs := &syncBuffer{}
	s := newSetup(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if mod != nil {
			mod(c)
		}
	})
	c := &chaos{setup: s, ctl: s.session(small), logs: logs}
	_, err := c.control()
	require.NoError(t, err)
	var lat []time.Duration
	for range 5 {
		d, err := c.control()
		require.NoError(t, err)
		lat = append(lat, d) // back to back: the quiet latency is only logged, beside the loaded one
	}
	c.quiet = median(lat)
	return c
}

// control runs the control job once and returns its latency.
func (c *chaos) control() (time.Duration, error) {
	start := time.Now()
	out, err := c.ctl.Run(context.Background(), Command{Script: "echo ok", Timeout: 10 * time.Second})
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if out.Reason != ReasonOK || string(out.Stdout.Head) != "ok\n" {
		return d, fmt.Errorf("control job: reason %s stdout %q stderr %q", out.Reason, out.Stdout.Head, out.Stderr.Head)
	}
	return d, nil
}

// job acquires the chaos job's own fresh container, labelled with a job id.
func (c *chaos) job(p Profile) *Session {
	c.t.Helper()
	sess, err := c.rt.Acquire(context.Background(), p, SessionOptions{
		Deadline: time.Now().Add(2 * time.Minute),
		Labels:   map[string]string{LabelJob: testsvc.Unique("chaos")},
	})
	require.NoError(c.t, err)
	c.t.Cleanup(sess.Close)
	return sess
}

// run runs cmd in sess while the control job runs alongside, and checks the
// control bound.
func (c *chaos) run(sess *Session, cmd Command) Outcome {
	c.t.Helper()
	done := make(chan struct{})
	var (
		wg     sync.WaitGroup
		lat    []time.Duration
		ctlErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			d, err := c.control()
			if err != nil {
				ctlErr = err
				return
			}
			lat = append(lat, d)
			select {
			case <-done:
				return
			case <-time.After(controlEvery):
			}
		}
	}()
	out, err := func() (Outcome, error) {
		defer func() { close(done); wg.Wait() }()
		if cmd.Timeout == 0 {
			cmd.Timeout = 20 * time.Second
		}
		return sess.Run(context.Background(), cmd)
	}()
	require.NoError(c.t, err)
	require.NoError(c.t, ctlErr, "the control job failed while the chaos job ran")
	// The control session kept answering while the chaos job ran (its
	// first command runs whatever the chaos job's length). How fast it
	// answered is a measurement, not a test on a shared, noisy machine:
	// the latencies are logged here, and `make bench`'s neighbours
	// scenario reports them as ratios side by side.
	require.NotEmpty(c.t, lat, "the control session answered no command while the chaos job ran")
	p50, worst := median(lat), slices.Max(lat)
	c.t.Logf("reason %s exit %d in %v; control quiet p50 %v, under chaos p50 %v max %v (%d runs)",
		out.Reason, out.ExitCode, out.Duration.Round(time.Millisecond), c.quiet.Round(10*time.Microsecond),
		p50.Round(10*time.Microsecond), worst.Round(10*time.Microsecond), len(lat))
	return out
}

// clean asserts that only init and the asking shell are alive in sess: the
// chaos command left nothing behind, and the session still works.
func (c *chaos) clean(sess *Session) {
	c.t.Helper()
	out := c.setup.run(sess, Command{Script: "set -- /proc/[0-9]*; echo $#"})
	assert.Equal(c.t, ReasonOK, out.Reason)
	assert.Equal(c.t, "2\n", string(out.Stdout.Head), "only init and this shell may be alive")
}

// end destroys the job's sessions and the control, and asserts that none of
// their containers survives.
func (c *chaos) end(jobs ...*Session) {
	c.t.Helper()
	for _, s := range jobs {
		s.Close()
	}
	c.ctl.Close()
	for _, s := range jobs {
		id := s.ContainerID()
		require.Eventually(c.t, func() bool {
			_, err := c.docker.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
			return cerrdefs.IsNotFound(err)
		}, 30*time.Second, 20*time.Millisecond, "container %s of the job survived", id)
	}
	requireNoContainers(c.t, c.docker, c.owner)
}

// sizeRw is what the container wrote to its writable layer on the host disk.
func (c *chaos) sizeRw(sess *Session) int64 {
	c.t.Helper()
	res, err := c.docker.ContainerInspect(context.Background(), sess.ContainerID(), client.ContainerInspectOptions{Size: true})
	require.NoError(c.t, err)
	if res.Container.SizeRw == nil {
		return 0
	}
	return *res.Container.SizeRw
}

func TestChaosForkBomb(t *testing.T) {
	t.Parallel()
	c := newChaos(t, nil)
	sess := c.job(deflt)
	for _, script := range []string{
		// The classic bomb, with a main process that stays: the bomb
		// reaches pids.max, init sees the cgroup's max counter move and
		// kills everything. (With `; wait` instead of `; sleep`, the main
		// shell may exit 0 before the bomb reaches the limit, and init then
		// kills the bomb as leftovers: reason ok. See the report on
		// TestRunReasons/fork_bomb.)
		":(){ :|:& };:; sleep 60",
		// A linear bomb: forks until refused.
		"while :; do sleep 1000 & done",
	} {
		out := c.run(sess, Command{Script: script, Timeout: 20 * time.Second})
		assert.Equal(t, ReasonPidsLimit, out.Reason, "%s: exit %d stderr %q", script, out.ExitCode, out.Stderr.Head)
		assert.Less(t, out.Duration, 15*time.Second, "the pids kill must not wait for the command timeout")
		c.clean(sess)
	}
	c.end(sess)
}

func TestChaosCPULoop(t *testing.T) {
	t.Parallel()
	c := newChaos(t, nil)
	sess := c.job(deflt)
	// Four busy loops: the container has 0.5 CPU whatever it starts.
	out := c.run(sess, Command{Script: "for i in 1 2 3 4; do (while :; do :; done) & done; while :; do :; done", Timeout: 2 * time.Second})
	assert.Equal(t, ReasonTimeout, out.Reason)
	assert.Equal(t, -1, out.ExitCode)
	c.clean(sess)
	c.end(sess)
}

func TestChaosMemoryBomb(t *testing.T) {
	t.Parallel()
	c := newChaos(t, nil)
	sess := c.job(small) // 64 MiB
	out := c.run(sess, Command{Script: `x=$(head -c 300m /dev/zero | tr '\0' a); echo ${#x}`, Timeout: 20 * time.Second})
	assert.Equal(t, ReasonOOM, out.Reason, "exit %d stderr %q", out.ExitCode, out.Stderr.Head)
	assert.GreaterOrEqual(t, out.OOMKills, int64(1))
	c.clean(sess)
	c.end(sess)
}

func TestChaosDiskFill(t *testing.T) {
	t.Parallel()
	vol := t.TempDir()
	require.NoError(t, os.Chmod(vol, 0o777))
	c := newChaos(t, func(c *Config) { c.FsizeBytes = 32 << 20 })
	var jobs []*Session

	// /tmp and the tmpfs workspace: the tmpfs size cap answers ENOSPC long
	// before the fsize ulimit, the write fails, and nothing reaches the
	// host disk (the container's writable layer stays empty: read-only root).
	p := Profile{Image: testsvc.TestImage, TmpfsMB: 16}
	for _, dir := range []string{"/tmp", WorkspaceDir} {
		sess := c.job(p)
		jobs = append(jobs, sess)
		out := c.run(sess, Command{Script: "cat /dev/zero > " + dir + "/fill"})
		assert.Equal(t, ReasonExitNonzero, out.Reason, "%s: stderr %q", dir, out.Stderr.Head)
		assert.Contains(t, string(out.Stderr.Head), "No space left on device", dir)
		df := c.setup.run(sess, Command{Script: "stat -c %s " + dir + "/fill; df -k " + dir + " | tail -1"})
		f := strings.Fields(string(df.Stdout.Head))
		require.GreaterOrEqual(t, len(f), 3, "%q", df.Stdout.Head)
		assert.Equal(t, strconv.Itoa(16<<20), f[0], "%s: the file stops at the tmpfs cap", dir)
		assert.Equal(t, strconv.Itoa(16<<10), f[2], "%s: tmpfs size", dir)
		assert.Zero(t, c.sizeRw(sess), "%s: bytes written to the container's layer on the host", dir)
		// The job can free its space and go on.
		again := c.setup.run(sess, Command{Script: "rm " + dir + "/fill && echo ok > " + dir + "/x && cat " + dir + "/x"})
		assert.Equal(t, "ok\n", string(again.Stdout.Head))
		c.clean(sess)
	}

	// A workspace on a host volume has no tmpfs cap: the fsize ulimit stops
	// the file, and the host file is exactly that size.
	pv := Profile{Image: testsvc.TestImage, Mounts: []Mount{{Source: vol, Target: WorkspaceDir}}}
	sess := c.job(pv)
	jobs = append(jobs, sess)
	out := c.run(sess, Command{Script: "cat /dev/zero > " + WorkspaceDir + "/fill"})
	assert.Equal(t, ReasonFsize, out.Reason, "volume: exit %d signal %d stderr %q", out.ExitCode, out.Signal, out.Stderr.Head)
	st, err := os.Stat(filepath.Join(vol, "fill"))
	require.NoError(t, err)
	assert.EqualValues(t, 32<<20, st.Size(), "host file size is the fsize cap")
	c.clean(sess)
	c.end(jobs...)
}

func TestChaosStdoutFloodKilled(t *testing.T) {
	t.Parallel()
	c := newChaos(t, nil) // default OutputKillBytes (256 MiB)
	sess := c.job(deflt)
	w := watchMemory()
	out := c.run(sess, Command{Script: "head -c 1100m /dev/zero"})
	heap, rss := w.stop()
	t.Logf("stdout %d bytes; worker heap +%d MiB, RSS +%d MiB", out.Stdout.Bytes, heap>>20, rss>>20)
	assert.Equal(t, ReasonOutputCap, out.Reason, "exit %d stderr %q", out.ExitCode, out.Stderr.Head)
	assert.Greater(t, out.Stdout.Bytes, int64(256<<20))
	assert.Less(t, out.Stdout.Bytes, int64(1100<<20))
	assert.True(t, out.Stdout.Truncated)
	assert.Len(t, out.Stdout.Head, 512<<10)
	assert.LessOrEqual(t, len(out.Stdout.Tail), 512<<10)
	c.clean(sess)
	c.end(sess)
}

func TestChaosStdoutFloodFull(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the 1 GiB flood that is not killed takes ~10-20 s")
	}
	t.Parallel()
	c := newChaos(t, func(c *Config) { c.OutputKillBytes = 4 << 30 })
	sess := c.job(deflt)
	w := watchMemory()
	var streamed atomic.Int64
	out := c.run(sess, Command{Script: "head -c 1073741824 /dev/zero; echo end", Timeout: 2 * time.Minute,
		OnOutput: func(_ Stream, p []byte) { streamed.Add(int64(len(p))) }})
	heap, rss := w.stop()
	t.Logf("stdout %d bytes in %v; worker heap +%d MiB, RSS +%d MiB", out.Stdout.Bytes, out.Duration, heap>>20, rss>>20)
	assert.Equal(t, ReasonOK, out.Reason, "exit %d stderr %q", out.ExitCode, out.Stderr.Head)
	assert.EqualValues(t, 1<<30+4, out.Stdout.Bytes)
	assert.True(t, out.Stdout.Truncated)
	assert.Len(t, out.Stdout.Head, 512<<10)
	assert.Len(t, out.Stdout.Tail, 512<<10)
	assert.True(t, bytes.HasSuffix(out.Stdout.Tail, []byte("\x00\x00end\n")))
	assert.EqualValues(t, 512<<10, streamed.Load(), "only the head is streamed to the worker")
	c.clean(sess)
	c.end(sess)
}

func TestChaosSleepForeverWithChildren(t *testing.T) {
	t.Parallel()
	c := newChaos(t, nil)
	sess := c.job(deflt)
	out := c.run(sess, Command{
		Script:  "sleep 1000 & setsid sleep 1000 & (sleep 1000 &); nohup sleep 1000 >/dev/null 2>&1 & trap '' TERM HUP; sleep 1000",
		Timeout: time.Second,
	})
	assert.Equal(t, ReasonTimeout, out.Reason)
	c.clean(sess) // every child, including the setsid and re-parented ones, is gone
	c.end(sess)
}

func TestChaosStop(t *testing.T) {
	t.Parallel()
	c := newChaos(t, nil)
	sess := c.job(deflt)
	for _, script := range []string{
		"sleep 1000 & kill -STOP 0", // its own process group
		"kill -STOP $$",             // itself
		"sleep 1000 & sleep 1000 & kill -STOP -1; kill -STOP $$", // everything it may signal
	} {
		out := c.run(sess, Command{Script: script, Timeout: time.Second})
		assert.Equal(t, ReasonTimeout, out.Reason, script)
		c.clean(sess)
	}
	c.end(sess)
}

func TestChaosNetworkExfil(t *testing.T) {
	t.Parallel()
	// A listener on the host's loopback: the container's 127.0.0.1 is its
	// own, so nothing may ever connect here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var accepted atomic.Int64
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-acceptDone })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	c := newChaos(t, nil)
	sess := c.job(deflt)
	for _, tc := range []struct{ name, script, stderr string }{
		{"tcp", "echo exfil | nc -w 2 127.0.0.1 " + port, "Connection refused"},
		{"dev tcp", "echo exfil > /dev/tcp/127.0.0.1/" + port, "Connection refused"},
		{"dns", "nslookup example.com", ""},
		{"docker socket", "ls /var/run/docker.sock /run/docker.sock", "No such file"},
	} {
		out := c.run(sess, Command{Script: tc.script, Timeout: 10 * time.Second})
		assert.Equal(t, ReasonExitNonzero, out.Reason, "%s: stdout %q stderr %q", tc.name, out.Stdout.Head, out.Stderr.Head)
		assert.Contains(t, string(out.Stderr.Head), tc.stderr, tc.name)
		if tc.name == "dns" {
			assert.NotContains(t, string(out.Stdout.Head), "Address", "dns answered")
		}
	}
	// Only the loopback interface, and no route at all.
	out := c.run(sess, Command{Script: "ls /sys/class/net; tail -n +2 /proc/net/route | wc -l"})
	assert.Equal(t, ReasonOK, out.Reason)
	assert.Equal(t, "lo\n0\n", strings.ReplaceAll(string(out.Stdout.Head), " ", ""))
	assert.Zero(t, accepted.Load(), "a container reached the host's loopback")
	c.end(sess)
}

func TestChaosWorkerEnv(t *testing.T) {
	t.Parallel()
	require.Equal(t, chaosCanary, os.Getenv("PADDOCK_CHAOS_CANARY"))
	c := newChaos(t, nil)
	sess := c.job(deflt)
	out := c.run(sess, Command{
		Script: `env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\0' '\n' < "$f"; done; ` +
			`cat /proc/self/mountinfo; ls -la / /tmp /workspace /.paddock; ! grep -r PADDOCK /etc /tmp /workspace`,
		Env: map[string]string{"JOB_VAR": "visible"},
	})
	assert.Equal(t, ReasonOK, out.Reason, "stderr %q", out.Stderr.Head)
	all := string(out.Stdout.Head) + string(out.Stdout.Tail) + string(out.Stderr.Head) + string(out.Stderr.Tail)
	assert.Contains(t, all, "JOB_VAR=visible", "the job's own environment is there")
	assert.NotContains(t, all, chaosCanary, "outputs")
	res, err := c.docker.ContainerInspect(context.Background(), sess.ContainerID(), client.ContainerInspectOptions{})
	require.NoError(t, err)
	js, err := json.Marshal(res.Container)
	require.NoError(t, err)
	assert.NotContains(t, string(js), chaosCanary, "container inspect")
	assert.NotContains(t, string(js), "PADDOCK_CHAOS_CANARY", "container inspect")
	c.end(sess)
	assert.NotContains(t, c.logs.String(), chaosCanary, "runtime logs")
}

func TestChaosWritesOutsideWorkspace(t *testing.T) {
	t.Parallel()
	c := newChaos(t, nil)
	sess := c.job(deflt)
	for _, script := range []string{
		"touch /etc/evil",
		"echo evil:x:0:0::/:/bin/sh >> /etc/passwd",
		"mkdir -p /usr/local/evil",
		"touch /evil",
		"touch /bin/evil",
		"echo evil > /.paddock/init",
		"echo max > /sys/fs/cgroup/pids/pids.max",
		"echo evil > /proc/sys/kernel/hostname",
	} {
		out := c.run(sess, Command{Script: script})
		assert.Equal(t, ReasonExitNonzero, out.Reason, script)
		errText := string(out.Stderr.Head)
		assert.True(t, strings.Contains(errText, "Read-only file system") || strings.Contains(errText, "Permission denied"),
			"%s: %q", script, errText)
	}
	out := c.run(sess, Command{Script: "echo a > /workspace/a && echo b > /tmp/b && cat /workspace/a /tmp/b"})
	assert.Equal(t, ReasonOK, out.Reason)
	assert.Equal(t, "a\nb\n", string(out.Stdout.Head))
	assert.Zero(t, c.sizeRw(sess), "bytes written to the container's layer on the host")
	c.end(sess)
}

func TestChaosProcStatus(t *testing.T) {
	t.Parallel()
	c := newChaos(t, nil)
	sess := c.job(deflt)
	out := c.run(sess, Command{Script: "grep -E '^(NoNewPrivs|CapPrm|CapEff|CapBnd|CapAmb|Seccomp):' /proc/self/status"})
	assert.Equal(t, ReasonOK, out.Reason)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out.Stdout.Head)), "\n") {
		k, v, _ := strings.Cut(line, ":")
		got[k] = strings.TrimSpace(v)
	}
	assert.Equal(t, map[string]string{
		"NoNewPrivs": "1", "Seccomp": "2",
		"CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
	}, got)
	c.end(sess)
}

// memWatch samples the test process's heap and RSS while a flood runs. They
// are logged, not asserted: the process's heap holds every parallel test's
// memory. What bounds the worker's memory is asserted instead (head and
// tail of at most 512 KiB, only the head streamed); `make bench`'s
// worker_rss scenario measures the worker's memory alone.
type memWatch struct {
	base, peak   uint64
	rss0, rssMax int64
	stopc, done  chan struct{}
}

func watchMemory() *memWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := &memWatch{base: ms.HeapAlloc, peak: ms.HeapAlloc, rss0: rssBytes(), stopc: make(chan struct{}), done: make(chan struct{})}
	w.rssMax = w.rss0
	go func() {
		defer close(w.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.stopc:
				return
			case <-t.C:
			}
			runtime.ReadMemStats(&ms)
			w.peak = max(w.peak, ms.HeapAlloc)
			w.rssMax = max(w.rssMax, rssBytes())
		}
	}()
	return w
}

// stop returns the peak growth of the heap and of the RSS over the baseline.
func (w *memWatch) stop() (heap uint64, rss int64) {
	close(w.stopc)
	<-w.done
	return w.peak - w.base, w.rssMax - w.rss0
}

func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * int64(os.Getpagesize())
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
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
