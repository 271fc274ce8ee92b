package sandbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

var initPath string

func TestMain(m *testing.M) { testsvc.InitMain(m, &initPath) }

type setup struct {
	t      *testing.T
	docker *client.Client
	rt     *Runtime
	owner  string
}

func newSetup(t *testing.T, mod func(*Config)) *setup {
	t.Helper()
	d := testsvc.Docker(t)
	testsvc.RequireImage(t, d, testsvc.TestImage)
	owner := testsvc.Unique("t")
	cfg := Config{Owner: owner, InitPath: initPath, PoolSize: -1}
	if mod != nil {
		mod(&cfg)
	}
	rt, err := New(d, cfg)
	require.NoError(t, err)
	require.NoError(t, rt.Start(context.Background()))
	t.Cleanup(func() {
		rt.Stop()
		// No container of this test may survive.
		requireNoContainers(t, d, owner)
	})
	return &setup{t: t, docker: d, rt: rt, owner: owner}
}

func requireNoContainers(t *testing.T, d *client.Client, owner string) {
	t.Helper()
	testsvc.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		list, err := d.ContainerList(context.Background(), client.ContainerListOptions{
			All: true, Filters: make(client.Filters).Add("label", LabelOwner+"="+owner)})
		require.NoError(t, err)
		return len(list.Items) == 0
	}, "containers of owner %s survived", owner)
}

var small = Profile{Image: testsvc.TestImage, MemoryMB: 64, Pids: 32, CPUs: 0.5, TmpfsMB: 16}

func (s *setup) session(p Profile) *Session {
	s.t.Helper()
	sess, err := s.rt.Acquire(context.Background(), p, SessionOptions{Deadline: time.Now().Add(2 * time.Minute)})
	require.NoError(s.t, err)
	s.t.Cleanup(sess.Close)
	return sess
}

func (s *setup) run(sess *Session, cmd Command) Outcome {
	s.t.Helper()
	if cmd.Timeout == 0 {
		cmd.Timeout = 20 * time.Second
	}
	out, err := sess.Run(context.Background(), cmd)
	require.NoError(s.t, err)
	return out
}

func TestRunReasons(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *Config) { c.FsizeBytes = 1 << 20; c.OutputKillBytes = 8 << 20 })
	cases := []struct {
		name    string
		script  string
		timeout time.Duration
		reason  Reason
		exit    int
		stdout  string
	}{
		{"ok", "echo hi", 0, ReasonOK, 0, "hi\n"},
		{"exit code", "echo out; echo err >&2; exit 3", 0, ReasonExitNonzero, 3, "out\n"},
		{"command not found", "no-such-tool --x", 0, ReasonExitNonzero, 127, ""},
		{"timeout kills children", "sleep 100 & setsid sleep 100 & sleep 100", time.Second, ReasonTimeout, -1, ""},
		{"fork bomb", ":(){ :|:& };:; sleep 60", 20 * time.Second, ReasonPidsLimit, -2, ""},
		{"memory bomb", `x=$(head -c 300m /dev/zero | tr '\0' a); echo ${#x}`, 20 * time.Second, ReasonOOM, -2, ""},
		{"fsize", "head -c 10m /dev/zero > /tmp/big", 0, ReasonFsize, -2, ""},
		{"output flood", "yes flood", 20 * time.Second, ReasonOutputCap, -2, ""},
		{"signal", "kill -TERM $$", 0, ReasonSignal, -1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sess := s.session(small)
			out := s.run(sess, Command{Script: tc.script, Timeout: tc.timeout, OutputBytes: 4096})
			assert.Equal(t, tc.reason, out.Reason, "exit %d signal %d stderr %q", out.ExitCode, out.Signal, out.Stderr.Head)
			if tc.exit != -2 {
				assert.Equal(t, tc.exit, out.ExitCode)
			}
			if tc.stdout != "" {
				assert.Equal(t, tc.stdout, string(out.Stdout.Head))
			}
			// The session survives every command outcome and is clean.
			after := s.run(sess, Command{Script: "set -- /proc/[0-9]*; echo $#"})
			assert.Equal(t, ReasonOK, after.Reason)
			assert.Equal(t, "2\n", string(after.Stdout.Head), "only init and this shell may be alive")
		})
	}
}

func TestOutputHeadAndTail(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess := s.session(small)
	out := s.run(sess, Command{Script: "seq 1 100000; echo done >&2", OutputBytes: 1000})
	assert.Equal(t, ReasonOK, out.Reason)
	assert.True(t, out.Stdout.Truncated)
	assert.EqualValues(t, 588895, out.Stdout.Bytes)
	assert.Len(t, out.Stdout.Head, 500)
	assert.Len(t, out.Stdout.Tail, 500)
	assert.True(t, strings.HasPrefix(string(out.Stdout.Head), "1\n2\n3\n"))
	assert.True(t, strings.HasSuffix(string(out.Stdout.Tail), "99999\n100000\n"))
	assert.Equal(t, "done\n", string(out.Stderr.Head))
	assert.False(t, out.Stderr.Truncated)

	var streamed int
	var mu sync.Mutex
	out = s.run(sess, Command{Script: "seq 1 10", OutputBytes: 1000, OnOutput: func(_ Stream, p []byte) {
		mu.Lock()
		streamed += len(p)
		mu.Unlock()
	}})
	assert.Equal(t, "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", string(out.Stdout.Head))
	assert.Equal(t, 21, streamed)
}

// With every byte streamed (StreamAll), the session keeps head and tail
// itself: exactly the first and the last half of the cap, in order, over
// a head grown frame by frame and a tail ring that wrapped mid-frame.
func TestOutputHeadAndTailStreamAll(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess := s.session(small)
	var b strings.Builder
	for i := 1; i <= 100000; i++ {
		b.WriteString(strconv.Itoa(i) + "\n")
	}
	want := b.String()
	var streamed int
	out := s.run(sess, Command{Script: "seq 1 100000", OutputBytes: 200_001, StreamAll: true,
		OnOutput: func(_ Stream, p []byte) { streamed += len(p) }})
	assert.Equal(t, ReasonOK, out.Reason)
	assert.Equal(t, len(want), streamed)
	assert.EqualValues(t, len(want), out.Stdout.Bytes)
	assert.True(t, out.Stdout.Truncated)
	assert.Equal(t, want[:100_000], string(out.Stdout.Head))
	assert.Equal(t, want[len(want)-100_001:], string(out.Stdout.Tail))

	out = s.run(sess, Command{Script: "seq 1 100000", OutputBytes: 2 << 20, StreamAll: true})
	assert.False(t, out.Stdout.Truncated)
	assert.Equal(t, want, string(out.Stdout.Head), "whole output")
}

func TestBackgroundChildrenDoNotOutliveCommand(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess := s.session(small)
	out := s.run(sess, Command{Script: "(setsid sleep 1000 &); sleep 1000 & echo started"})
	assert.Equal(t, ReasonOK, out.Reason)
	assert.Equal(t, "started\n", string(out.Stdout.Head))
	assert.GreaterOrEqual(t, out.Leftover, 2)
}

func TestIsolation(t *testing.T) {
	t.Setenv("PADDOCK_CANARY_SECRET", "canary-7f3a")
	s := newSetup(t, nil)
	sess := s.session(small)
	out := s.run(sess, Command{Script: `env; cat /proc/1/environ | tr '\0' '\n'; id -u; touch /x 2>&1; ls /sys/class/net; grep -E 'NoNewPrivs|CapEff|Seccomp:' /proc/self/status`,
		Env: map[string]string{"JOB_VAR": "visible"}})
	text := string(out.Stdout.Head) + string(out.Stderr.Head)
	assert.NotContains(t, text, "canary-7f3a")
	assert.Contains(t, text, "JOB_VAR=visible")
	assert.Contains(t, text, "1000\n")
	assert.Contains(t, text, "Read-only file system")
	assert.Contains(t, text, "NoNewPrivs:\t1")
	assert.Contains(t, text, "CapEff:\t0000000000000000")
	assert.Contains(t, text, "Seccomp:\t2")
	assert.Contains(t, text, "lo\n")
	assert.NotContains(t, text, "eth0")
}

func TestSelfTest(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	require.NoError(t, s.rt.SelfTest(context.Background(), small))
}

func TestPoolServesFreshContainers(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *Config) { c.PoolSize = 2 })
	require.NoError(t, s.rt.Start(context.Background())) // idempotent
	s.rt.take(small.withDefaults())                      // register the profile
	require.Eventually(t, func() bool { return s.rt.PoolSize() >= 2 }, 60*time.Second, 20*time.Millisecond)
	seen := map[string]bool{}
	for i := range 4 {
		sess, err := s.rt.Acquire(context.Background(), small, SessionOptions{})
		require.NoError(t, err)
		assert.False(t, seen[sess.ContainerID()], "container reused")
		seen[sess.ContainerID()] = true
		out := s.run(sess, Command{Script: "ls /tmp | wc -l; touch /tmp/mark" + fmt.Sprint(i)})
		assert.Equal(t, "0\n", strings.TrimLeft(string(out.Stdout.Head), " "), "a fresh container has an empty /tmp")
		sess.Close()
		if i == 0 {
			require.Eventually(t, func() bool { return s.rt.PoolSize() >= 1 }, 60*time.Second, 20*time.Millisecond)
		}
	}
	assert.GreaterOrEqual(t, s.rt.Stats().Hits.Load(), int64(2))
	for id := range seen {
		require.Eventually(t, func() bool {
			_, err := s.docker.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
			return cerrdefs.IsNotFound(err)
		}, 30*time.Second, 20*time.Millisecond, "container %s not removed", id)
	}
}

func TestCancelDestroysContainer(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess := s.session(small)
	ctx, cancel := context.WithCancel(context.Background())
	// Canceled once the command has shown it runs.
	out, err := sess.Run(ctx, Command{Script: "echo running; sleep 100", Timeout: time.Minute,
		OnOutput: func(st Stream, b []byte) {
			if st == Stdout && strings.Contains(string(b), "running") {
				cancel()
			}
		}})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, ReasonCanceled, out.Reason)
	_, err = sess.Run(context.Background(), Command{Script: "echo again"})
	assert.ErrorIs(t, err, ErrSessionBroken)
	require.Eventually(t, func() bool {
		_, err := s.docker.ContainerInspect(context.Background(), sess.ContainerID(), client.ContainerInspectOptions{})
		return cerrdefs.IsNotFound(err)
	}, 30*time.Second, 20*time.Millisecond)
}

func TestJobDeadlineDestroysContainer(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess, err := s.rt.Acquire(context.Background(), small, SessionOptions{Deadline: time.Now().Add(time.Second)})
	require.NoError(t, err)
	defer sess.Close()
	out, err := sess.Run(context.Background(), Command{Script: "sleep 100", Timeout: time.Minute})
	require.ErrorIs(t, err, ErrSessionBroken)
	assert.Equal(t, ReasonTimeout, out.Reason)
}

type deadOwners struct{ dead string }

func (d deadOwners) Alive(_ context.Context, owner string) (bool, error) { return owner != d.dead, nil }

func TestReaperRemovesOrphans(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	ghost := testsvc.Unique("ghost")
	// A container left by a crashed worker: labelled with an owner whose
	// heartbeat is gone, still running.
	created, err := s.docker.ContainerCreate(context.Background(), client.ContainerCreateOptions{
		Config: &container.Config{Image: testsvc.TestImage, Cmd: []string{"sleep", "1000"},
			Labels: map[string]string{LabelManaged: "1", LabelOwner: ghost}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	require.NoError(t, err)
	_, err = s.docker.ContainerStart(context.Background(), created.ID, client.ContainerStartOptions{})
	require.NoError(t, err)
	live := s.session(small) // this owner's tracked container must survive
	rp := NewReaper(s.rt, deadOwners{dead: ghost})
	t.Cleanup(func() { // never leak the ghost, even when the test fails
		_, _ = s.docker.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	})
	for range 3 { // Start/Stop repeatedly; Stop may cut a pass short
		require.NoError(t, rp.Start(context.Background()))
		require.NoError(t, rp.Start(context.Background()))
		rp.Stop()
		rp.Stop()
	}
	n, err := rp.Reap(context.Background())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 1)
	requireNoContainers(t, s.docker, ghost)
	out := s.run(live, Command{Script: "echo alive"})
	assert.Equal(t, "alive\n", string(out.Stdout.Head))
}

func TestMissingImageIsInfraNotRetryable(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	_, err := s.rt.Acquire(context.Background(), Profile{Image: "paddock/no-such-image:1"}, SessionOptions{})
	require.Error(t, err)
	var ie *InfraError
	require.ErrorAs(t, err, &ie)
	assert.False(t, ie.Retryable)
	assert.Contains(t, err.Error(), "make images")
}

// A job whose deadline passed while its container was starting (a loaded
// engine) ends as a timeout, not as an unexplained broken session.
func TestDeadlinePassedBeforeFirstCommand(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess, err := s.rt.Acquire(context.Background(), small, SessionOptions{Deadline: time.Now().Add(-time.Second)})
	require.NoError(t, err)
	defer sess.Close()
	out, err := sess.Run(context.Background(), Command{Script: "echo never"})
	require.ErrorIs(t, err, ErrSessionBroken)
	assert.Equal(t, ReasonTimeout, out.Reason)
	assert.Equal(t, -1, out.ExitCode)
}
