package sandbox

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

func TestWeightConfig(t *testing.T) {
	t.Parallel()
	ok := func(*Config) {}
	cases := []struct {
		name string
		mod  func(*Config)
		bad  string // "" = valid
	}{
		{"defaults", ok, ""},
		{"shares and cpuset", func(c *Config) { c.CPUShares, c.CPUSet, c.DemoteAfter = 2048, "1,3-5", 500e6 }, ""},
		{"shares too low", func(c *Config) { c.CPUShares = 1 }, "box cpu shares 1"},
		{"shares too high", func(c *Config) { c.CPUShares = 300000 }, "box cpu shares 300000"},
		{"demoted shares too low", func(c *Config) { c.DemotedCPUShares = 1 }, "demoted cpu shares 1"},
		{"negative demote-after", func(c *Config) { c.DemoteAfter = -1 }, "demote-after"},
		{"cpuset not a list", func(c *Config) { c.CPUSet = "1-" }, `box cpuset "1-"`},
		{"cpuset words", func(c *Config) { c.CPUSet = "all" }, `box cpuset "all"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Owner: "o", InitPath: initPath}
			tc.mod(&c)
			got, err := c.withDefaults()
			if tc.bad == "" {
				require.NoError(t, err)
				assert.Equal(t, int64(defaultDemotedShares), got.DemotedCPUShares)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			assert.Contains(t, err.Error(), tc.bad)
		})
	}
}

// TestBoxCPUWeight: a box starts at Config.CPUShares pinned to
// Config.CPUSet, as the kernel sees it from inside the box; a command
// that runs past DemoteAfter demotes it to DemotedCPUShares; and the job
// can neither raise its weight back nor leave its cpuset.
func TestBoxCPUWeight(t *testing.T) {
	t.Parallel()
	w := hostWeights(t)
	s := newSetup(t, func(c *Config) { c.CPUShares, c.CPUSet, c.DemoteAfter, c.DemotedCPUShares = 512, "0", 300e6, 8 })
	sess := s.session(small)

	out := s.run(sess, Command{Script: w.read})
	require.Equal(t, ReasonOK, out.Reason, "%s", out.Stderr.Head)
	first := strings.TrimSpace(string(out.Stdout.Head))
	w.check(t, 512, first, "a new box runs at Config.CPUShares")
	hc := inspectHost(t, s.docker, sess.ContainerID())
	assert.Equal(t, int64(512), hc.CPUShares)
	assert.Equal(t, "0", hc.CpusetCpus)

	// A command that runs on is demoted while it runs (the loop ends only
	// then; the command's timeout bounds the wait).
	out = s.run(sess, Command{Script: `while [ "$(` + w.read + `)" = ` + first + ` ]; do sleep 0.05; done; ` + w.read})
	require.Equal(t, ReasonOK, out.Reason, "never demoted: %s %s", out.Stdout.Head, out.Stderr.Head)
	demoted := strings.TrimSpace(string(out.Stdout.Head))
	w.check(t, 8, demoted, "demoted to Config.DemotedCPUShares")
	d, _ := strconv.Atoi(demoted)
	f, _ := strconv.Atoi(first)
	assert.Less(t, d, f, "the demoted weight is below the box's first")
	assert.Equal(t, int64(8), inspectHost(t, s.docker, sess.ContainerID()).CPUShares)

	// The job cannot undo either setting.
	out = s.run(sess, Command{Script: "echo " + first + " > " + w.file + " 2>/dev/null; " + w.read +
		"; taskset -p 3 $$ >/dev/null 2>&1; grep Cpus_allowed_list /proc/self/status"})
	fields := strings.Fields(string(out.Stdout.Head))
	require.Len(t, fields, 3, "stdout %q stderr %q", out.Stdout.Head, out.Stderr.Head)
	assert.Equal(t, []string{demoted, "Cpus_allowed_list:", "0"}, fields)
}

// boxWeights is how a box sees its CPU weight on this host's cgroups.
type boxWeights struct {
	file string // the box's weight file, as the box sees it
	read string // a script printing it
	v2   bool
}

// hostWeights: on cgroup v1 a box reads its cpu.shares; on v2 (unified,
// Debian 12's default) its cpu.weight, which the OCI runtime derives from
// the engine's shares.
func hostWeights(t *testing.T) boxWeights {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		const f = "/sys/fs/cgroup/cpu.weight"
		return boxWeights{file: f, read: "cat " + f, v2: true}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.shares"); err != nil {
		t.Fatalf("this host has neither cgroup v2 (cgroup.controllers) nor v1's cpu controller (cpu/cpu.shares): %v", err)
	}
	const f = "/sys/fs/cgroup/cpu/cpu.shares"
	return boxWeights{file: f, read: "cat " + f}
}

// check asserts that got is the box's view of shares: the value itself on
// v1; on v2 a weight in cpu.weight's range, and for the engine's default
// (1024) and below its default weight (100) strictly smaller. runc 1.1
// maps shares linearly (512 → 20, 8 → 1), runc 1.3 otherwise: only the
// order is the contract.
func (w boxWeights) check(t *testing.T, shares int64, got, what string) {
	t.Helper()
	if !w.v2 {
		assert.Equal(t, strconv.FormatInt(shares, 10), got, what)
		return
	}
	n, err := strconv.ParseInt(got, 10, 64)
	require.NoError(t, err, "%s: cpu.weight %q", what, got)
	assert.True(t, n >= 1 && n < 100, "%s: cpu.weight %d for shares %d, want 1 to 99 (below the default 100)", what, n, shares)
}

// TestShortCommandKeepsWeight: commands that end before DemoteAfter do
// not demote their box, even once DemoteAfter has passed since each began.
func TestShortCommandKeepsWeight(t *testing.T) {
	t.Parallel()
	const after = time.Second
	s := newSetup(t, func(c *Config) { c.DemoteAfter = after })
	sess := s.session(small)
	longest := time.Duration(0)
	for range 3 {
		t0 := time.Now()
		out := s.run(sess, Command{Script: "echo ok"})
		longest = max(longest, time.Since(t0))
		require.Equal(t, ReasonOK, out.Reason)
	}
	// The witness: a command started after all of those, in a box of its
	// own, runs on until its demotion comes. Any demotion one of them had
	// left pending was due before it, so it had its chance.
	witness := s.session(small)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_, _ = witness.Run(ctx, Command{Script: "sleep 100", Timeout: time.Minute})
	}()
	testsvc.Eventually(t, time.Minute, 10*time.Millisecond, witness.b.demoted.Load, "the witness box was never demoted")
	cancel()
	<-ran
	if longest >= after {
		t.Skipf("an `echo ok` took %s, past DemoteAfter: the host is too loaded for this test", longest)
	}
	assert.False(t, sess.b.demoted.Load(), "a box whose commands all ended before DemoteAfter was demoted")
	assert.Equal(t, int64(0), inspectHost(t, s.docker, sess.ContainerID()).CPUShares, "the engine's default weight")
}

func inspectHost(t *testing.T, d *client.Client, id string) struct {
	CPUShares  int64
	CpusetCpus string
} {
	t.Helper()
	res, err := d.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	require.NoError(t, err)
	require.NotNil(t, res.Container.HostConfig)
	hc := res.Container.HostConfig
	return struct {
		CPUShares  int64
		CpusetCpus string
	}{hc.CPUShares, hc.CpusetCpus}
}
