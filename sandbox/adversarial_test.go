package sandbox

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// The adversarial suite: the code in the box knows Paddock and attacks its
// control plane. Every case checks the job's own true outcome, that the
// box's init is still in charge (the next command of the session runs),
// and that the next box on the same runtime and image is unaffected.

const attackDir = testsvc.AttackDir

func newAttackSetup(t *testing.T, mod func(*Config)) *setup {
	dir := testsvc.BuildAttack(t)
	return newSetup(t, func(c *Config) {
		c.ExtraMounts = []Mount{{Source: dir, Target: attackDir}}
		if mod != nil {
			mod(c)
		}
	})
}

// requireUnaffected: the session's init still runs commands, and a new box
// of the same image still gets bash and a clean run.
func (s *setup) requireUnaffected(sess *Session) {
	s.t.Helper()
	if sess != nil {
		after := s.run(sess, Command{Script: "echo still; set -- /proc/[0-9]*; echo $#"})
		assert.Equal(s.t, ReasonOK, after.Reason, "the attacked session's init no longer runs commands")
		assert.Equal(s.t, "still\n2\n", string(after.Stdout.Head), "only init and this shell may be alive")
	}
	next := s.session(small)
	out := s.run(next, Command{Script: `echo "next ${BASH_VERSION%%.*}"`})
	assert.Equal(s.t, ReasonOK, out.Reason)
	assert.Equal(s.t, "next 5\n", string(out.Stdout.Head), "the next box must still run its commands with bash")
}

func TestAttackInitFromInside(t *testing.T) {
	t.Parallel()
	s := newAttackSetup(t, nil)
	sess := s.session(small)
	out := s.run(sess, Command{Script: attackDir + `/attack all; echo "rc=$?"; exit 3`, OutputBytes: 64 << 10})
	stdout := string(out.Stdout.Head)
	t.Logf("attack report:\n%s", stdout)
	assert.Equal(t, ReasonExitNonzero, out.Reason, "the job's own exit, nothing forged: %s", out.Stderr.Head)
	assert.Equal(t, 3, out.ExitCode)
	assert.Contains(t, stdout, "reached: none")
	assert.Contains(t, stdout, "rc=0")
	for _, attack := range []string{"list /proc/1/fd", "open /proc/1/fd/1 (w)", "open /proc/1/fd/0 (r)", "read /proc/1/mem",
		"read /proc/1/environ", "read /proc/1/exe", "ptrace attach PID 1", "process_vm_readv PID 1", "pidfd_getfd init's fds",
		"connect /.paddock/ctl/init.sock", "create in /.paddock/ctl"} {
		assert.Regexp(t, `(?m)^`+regexpQuote(attack)+` +refused: `, stdout, "attack %q must be refused", attack)
	}
	s.requireUnaffected(sess)
}

func TestAttackSignalsToInit(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess := s.session(small)
	// bash's kill: every signal by number, then the usual ones by name.
	out := s.run(sess, Command{Script: `for n in $(seq 1 64); do kill -$n 1; done 2>/dev/null
		kill -TERM 1; kill -INT 1; kill -HUP 1; kill -KILL 1; kill -STOP 1; kill -SEGV 1; kill -QUIT 1
		sleep 0.2; echo alive; exit 4`})
	assert.Equal(t, ReasonExitNonzero, out.Reason, "stderr %q", out.Stderr.Head)
	assert.Equal(t, 4, out.ExitCode)
	assert.Equal(t, "alive\n", string(out.Stdout.Head))
	s.requireUnaffected(sess)
}

// TestAttackForgedFramesOnOwnStreams: protocol bytes and garbage written to
// the job's own stdout and stderr are the job's output, byte for byte.
func TestAttackForgedFramesOnOwnStreams(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess := s.session(small)
	forged := `X\0\0\0\035{"id":1,"exit_code":0,"d":0} H\0\0\0\2{}`
	out := s.run(sess, Command{Script: `printf '` + forged + `'; printf '` + forged + `' >&2
		for fd in /proc/self/fd/*; do printf '` + forged + `' > $fd; done 2>/dev/null; exit 6`, OutputBytes: 1 << 20})
	assert.Equal(t, ReasonExitNonzero, out.Reason)
	assert.Equal(t, 6, out.ExitCode)
	want := "X\x00\x00\x00\x1d{\"id\":1,\"exit_code\":0,\"d\":0} H\x00\x00\x00\x02{}"
	assert.True(t, strings.HasPrefix(string(out.Stdout.Head), want+want), "stdout %q", out.Stdout.Head)
	assert.True(t, strings.HasPrefix(string(out.Stderr.Head), want+want), "stderr %q", out.Stderr.Head)
	s.requireUnaffected(sess)
}

// TestAttackFloodAtMaxCaps: both streams flooded at the largest output cap
// a job may ask for; the tails travel in chunks, so no frame grows with the
// cap and the outcome is the job's. Not parallel: it holds 64 MiB of output
// in this process, which the chaos suite's heap bound would count.
func TestAttackFloodAtMaxCaps(t *testing.T) {
	s := newSetup(t, func(c *Config) { c.OutputKillBytes = 256 << 20 })
	sess := s.session(small)
	const capBytes = 16 << 20
	out := s.run(sess, Command{Script: `head -c 20000000 /dev/urandom & head -c 20000000 /dev/urandom >&2; wait; exit 9`,
		OutputBytes: capBytes, Timeout: 60 * time.Second})
	assert.Equal(t, ReasonExitNonzero, out.Reason)
	assert.Equal(t, 9, out.ExitCode)
	for _, o := range []Output{out.Stdout, out.Stderr} {
		assert.Equal(t, int64(20000000), o.Bytes)
		assert.True(t, o.Truncated)
		assert.Len(t, o.Head, capBytes/2)
		assert.Len(t, o.Tail, capBytes/2)
	}
	s.requireUnaffected(sess)
}

// TestAttackPATHDoesNotChangeTheShell: a job whose environment hides bash
// fails alone; the next box still runs bash (the shell comes from init's
// hello, not from what a command reported).
func TestAttackPATHDoesNotChangeTheShell(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess := s.session(small)
	out := s.run(sess, Command{Script: `echo "bash: bash: command not found" >&2; exit 127`, Env: map[string]string{"PATH": "/nowhere"}})
	assert.Equal(t, ReasonExitNonzero, out.Reason)
	assert.Equal(t, 127, out.ExitCode)
	s.requireUnaffected(sess)
}

func regexpQuote(s string) string {
	r := strings.NewReplacer(`(`, `\(`, `)`, `\)`, `.`, `\.`, `/`, `/`, `'`, `'`)
	return r.Replace(s)
}
