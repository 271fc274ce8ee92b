package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/worker"
)

// devStack is a real `paddock up` (embedded NATS in operator mode, a
// password-protected redis-server child, a scheduler and a worker on the
// real Docker engine) with its own data dir and ports.
type devStack struct {
	dir, natsURL string
	stderr       *syncBuffer
}

var (
	initOnce sync.Once
	initBin  string
	initErr  error
)

// initBinary builds the static paddock-init once for the tests that run a
// worker.
func initBinary(t *testing.T) string {
	t.Helper()
	initOnce.Do(func() {
		dir, err := os.MkdirTemp("", "paddock-init-")
		if err != nil {
			initErr = err
			return
		}
		initBin = filepath.Join(dir, "paddock-init")
		build := exec.Command("go", "build", "-o", initBin, "github.com/paddockhq/paddock/cmd/paddock-init")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			initErr = fmt.Errorf("build paddock-init: %v\n%s", err, out)
		}
	})
	require.NoError(t, initErr)
	return initBin
}

func startUp(t *testing.T) *devStack {
	t.Helper()
	return startUpWith(t)
}

// startUpWith starts `paddock up` with extra flags (a repeated list flag
// such as --images adds to the list).
func startUpWith(t *testing.T, extra ...string) *devStack {
	t.Helper()
	testsvc.RequireImage(t, testsvc.Docker(t), testsvc.TestImage)
	s := &devStack{dir: t.TempDir(), stderr: &syncBuffer{}}
	ready := filepath.Join(s.dir, "ready")
	// Runs after up stopped: volumes are filesystems mounted under the root.
	t.Cleanup(func() { assert.NoError(t, worker.UnmountVolumes(filepath.Join(s.dir, "volumes"))) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	// Port 0 everywhere: up picks free ports as it binds them (no other
	// test can take them in between) and names them in the ready file.
	go func() {
		done <- Run(ctx, append([]string{"up", "--data-dir", s.dir, "--nats-url", "nats://127.0.0.1:0", "--redis-url", "redis://127.0.0.1:0",
			"--ready-file", ready, "--concurrency", "2", "--pool-size", "1", "--init-path", initBinary(t),
			"--images", testsvc.TestImage, "--gateway-addr", "127.0.0.1:0"}, extra...), &syncBuffer{}, s.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("paddock up did not stop")
		}
	})
	require.Eventually(t, func() bool { return fileExists(ready) }, 60*time.Second, 50*time.Millisecond, "up never ready:\n%s", s.stderr)
	b, err := os.ReadFile(ready)
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if u, ok := strings.CutPrefix(l, "nats="); ok {
			s.natsURL = u
		}
	}
	require.NotEmpty(t, s.natsURL, "the ready file names NATS:\n%s", b)
	return s
}

// cli runs paddock against the stack: as its dev tenant by default, or
// with the flags given (e.g. --creds).
func (s *devStack) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLIOut(t, append([]string{"--data-dir", s.dir, "--nats-url", s.natsURL}, args...)...)
}

func (s *devStack) addTenant(t *testing.T, name string, flags ...string) string {
	t.Helper()
	creds := filepath.Join(s.dir, name+".creds")
	code, out, _ := s.cli(t, append([]string{"tenant", "add", name, "--out", creds}, flags...)...)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "tenant "+name+" added")
	return creds
}

func (s *devStack) result(t *testing.T, creds string, args ...string) (int, job.Result) {
	t.Helper()
	code, out, _ := s.cli(t, append([]string{"--creds", creds, "-o", "json"}, args...)...)
	var r job.Result
	if code != exitFailure {
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &r), out)
	}
	return code, r
}

// Two tenants on one authenticated stack cannot see or touch each other's
// jobs, results or volumes; the NATS server refuses what their
// credentials do not allow, and nobody gets in without credentials.
func TestTenantsAreIsolated(t *testing.T) {
	s := startUp(t)
	a, b := s.addTenant(t, "alpha"), s.addTenant(t, "beta")
	info, err := os.Stat(a)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	// The dev tenant works without flags, anonymous clients are refused.
	code, out, _ := s.cli(t, "submit", "--wait", "--", "echo dev")
	require.Equal(t, exitOK, code, out)
	code, _, errOut := runCLIOut(t, "--data-dir", t.TempDir(), "--nats-url", s.natsURL, "get", "x")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "refused the credentials")
	_, err = nats.Connect(s.natsURL)
	assert.ErrorIs(t, err, nats.ErrAuthorization, "an anonymous connection is refused by the server")

	// alpha writes its volume; the same id and volume name are beta's own.
	code, ra := s.result(t, a, "submit", "--wait", "--id", "same", "--volume", "v", "--", "echo alpha-secret > /workspace/f; cat /workspace/f")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "alpha", ra.Tenant)
	assert.Equal(t, "alpha-secret\n", ra.Stdout.Text)
	code, rb := s.result(t, b, "submit", "--wait", "--id", "same", "--volume", "v", "--", "cat /workspace/f || echo no-file")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "beta", rb.Tenant)
	assert.Contains(t, rb.Stdout.Text, "no-file", "beta's volume v is not alpha's")
	assert.NotContains(t, rb.Stdout.Text, "alpha-secret")

	// beta cannot read or cancel alpha's job.
	code, _ = s.result(t, b, "get", "alpha-only")
	assert.Equal(t, exitFailure, code)
	code, ra = s.result(t, a, "submit", "--wait", "--id", "alpha-only", "--", "echo mine")
	require.Equal(t, exitOK, code)
	code, _ = s.result(t, b, "get", "alpha-only")
	assert.Equal(t, exitFailure, code, "beta gets no result for alpha's id")
	code, out, _ = s.cli(t, "--creds", b, "cancel", "alpha-only")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "flagged", "beta's cancel names beta's own (unknown) job")
	code, ra = s.result(t, a, "get", "alpha-only")
	require.Equal(t, exitOK, code)
	assert.Equal(t, job.StateSucceeded, ra.State, "alpha's result is untouched")

	s.rawAttacks(t, b)
	s.noSecretsInLogs(t)
}

// rawAttacks: with beta's credentials, publishing as alpha and reading
// alpha's results are refused by the server itself.
func (s *devStack) rawAttacks(t *testing.T, creds string) {
	t.Helper()
	errs := make(chan error, 8)
	nc, err := nats.Connect(s.natsURL, nats.UserCredentials(creds), nats.CustomInboxPrefix(job.InboxPrefix("beta")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.Publish(job.SubmitSubject("alpha"), []byte(`{"command":"echo forged"}`)))
	_, err = nc.Subscribe(job.ResultSubjects("alpha"), func(*nats.Msg) {})
	require.NoError(t, err) // refused asynchronously
	require.NoError(t, nc.Flush())
	var got []string
	deadline := time.After(5 * time.Second)
	for len(got) < 2 {
		select {
		case err := <-errs:
			got = append(got, err.Error())
		case <-deadline:
			t.Fatalf("the server did not refuse both: %v", got)
		}
	}
	joined := strings.Join(got, "\n")
	assert.Contains(t, joined, `Permissions Violation for Publish to "paddock.jobs.submit.alpha"`)
	assert.Contains(t, joined, `Permissions Violation for Subscription to "paddock.results.alpha.>"`)
}

// noSecretsInLogs: no seed, JWT or password of the stack is in its log or
// its spans.
func (s *devStack) noSecretsInLogs(t *testing.T) {
	t.Helper()
	spans, err := os.ReadFile(filepath.Join(s.dir, "spans.jsonl"))
	require.NoError(t, err)
	require.NotEmpty(t, spans)
	log := s.stderr.String() + string(spans)
	pw, err := os.ReadFile(filepath.Join(s.dir, "auth", "redis.password"))
	require.NoError(t, err)
	assert.NotContains(t, log, strings.TrimSpace(string(pw)))
	creds, err := os.ReadFile(filepath.Join(s.dir, "auth", "creds", "scheduler.creds"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(creds), "\n") {
		if len(line) > 40 && !strings.HasPrefix(line, "-") {
			assert.NotContains(t, log, line, "a credential line is in the log")
		}
	}
	assert.NotContains(t, log, "SUA", "an NKey user seed is in the log")
}

// Quotas: max-queued is refused at submit with a typed error; a removed
// tenant's credentials stop working.
func TestTenantQuotaAndRemoval(t *testing.T) {
	s := startUp(t)
	q := s.addTenant(t, "quota", "--max-queued", "1")
	code, out, _ := s.cli(t, "tenant", "ls", "-o", "json")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, `"name":"quota","max_queued":1`)

	code, first, _ := s.cli(t, "--creds", q, "submit", "--", "sleep 20")
	require.Equal(t, exitOK, code)
	code, _, errOut := s.cli(t, "--creds", q, "submit", "--", "echo second")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "max-queued")
	code, _, _ = s.cli(t, "--creds", q, "cancel", strings.TrimSpace(first))
	assert.Equal(t, exitOK, code)
	code, out, _ = s.cli(t, "tenant", "set", "quota", "--max-queued", "3")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "quota  3")
	require.Eventually(t, func() bool {
		code, _, _ := s.cli(t, "--creds", q, "submit", "--", "echo after raise")
		return code == exitOK
	}, 30*time.Second, 200*time.Millisecond, "a raised max-queued lets the next job in")

	code, out, _ = s.cli(t, "tenant", "rm", "quota")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "revoked")
	code, _, errOut = s.cli(t, "--creds", q, "get", "x")
	assert.Equal(t, exitFailure, code)
	assert.True(t, strings.Contains(errOut, "refused") || strings.Contains(errOut, "revoked"), errOut)
	_, err := nats.Connect(s.natsURL, nats.UserCredentials(q))
	assert.True(t, errors.Is(err, nats.ErrAuthorization) || err != nil, fmt.Sprint(err))
}

func TestRedisPasswordFileMode(t *testing.T) {
	dir := t.TempDir()
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o400: true, 0o640: true, 0o440: true, 0o644: false, 0o620: false, 0o660: false, 0o604: false} {
		p := filepath.Join(dir, fmt.Sprintf("pw-%o", mode))
		require.NoError(t, os.WriteFile(p, []byte("s3cret\n"), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		a := authFlags{redisPasswordFile: p}
		pw, err := a.redisPassword()
		if ok {
			assert.NoError(t, err, "%o", mode)
			assert.Equal(t, "s3cret", pw)
		} else {
			assert.ErrorContains(t, err, "chmod 600", "%o", mode)
			assert.NotContains(t, fmt.Sprint(err), "s3cret")
		}
	}
}
