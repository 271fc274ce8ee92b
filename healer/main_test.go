package healer_test

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
)

var initPath string

func TestMain(m *testing.M) { testsvc.InitMain(m, &initPath) }

// sandboxPath is the sandbox's default PATH plus the test install prefix's
// bin directories (what the lead adds to the sandbox default, for
// healer.DefaultPrefix).
const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" +
	testPrefix + "/usr/local/bin:" + testPrefix + "/usr/bin:" + testPrefix + "/bin"

// testPrefix stands in for healer.DefaultPrefix: a host directory owned
// by the sandbox user, bind-mounted exec-allowed, until the sandbox
// mounts its own tmpfs there. A name of its own, so the tests keep
// working once it does.
const testPrefix = "/.paddock/test-root"

// setup is one test's real sandbox runtime.
type setup struct {
	docker *client.Client
	rt     *sandbox.Runtime
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	d := testsvc.Docker(t)
	testsvc.RequireImage(t, d, testsvc.TestImage)
	cfg := sandbox.Config{Owner: testsvc.Unique("heal"), InitPath: initPath, PoolSize: -1}
	rt, err := sandbox.New(d, cfg)
	require.NoError(t, err)
	require.NoError(t, rt.Start(context.Background()))
	t.Cleanup(rt.Stop)
	return &setup{docker: d, rt: rt}
}

// small is the profile of most tests.
func small(image string) sandbox.Profile {
	return sandbox.Profile{Image: image, MemoryMB: 128, Pids: 64, CPUs: 0.5, TmpfsMB: 16}
}

// withPrefix adds the stand-in install prefix mount to p.
func (s *setup) withPrefix(t *testing.T, p sandbox.Profile) sandbox.Profile {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chown(dir, 1000, 1000), "the prefix must belong to the sandbox user (run the tests as root)")
	p.Mounts = append(p.Mounts, sandbox.Mount{Source: dir, Target: testPrefix})
	return p
}

// session acquires a fresh container for t and adapts it to
// healer.Executor.
func (s *setup) session(t *testing.T, p sandbox.Profile, env map[string]string) *sessionExec {
	t.Helper()
	base := map[string]string{"PATH": sandboxPath}
	for k, v := range env {
		base[k] = v
	}
	sess, err := s.rt.Acquire(context.Background(), p, sandbox.SessionOptions{
		Deadline: time.Now().Add(3 * time.Minute), Env: base})
	require.NoError(t, err)
	t.Cleanup(sess.Close)
	return &sessionExec{sess: sess, outputBytes: 64 << 10}
}

// newLoop returns a Loop with the test prefix.
func newLoop(t *testing.T, cfg healer.Config) *healer.Loop {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix
	}
	l, err := healer.New(cfg)
	require.NoError(t, err)
	return l
}

// events counts what a Loop reports through Metrics.Event.
type events struct {
	mu sync.Mutex
	n  map[string]int64
}

func newEvents() *events { return &events{n: map[string]int64{}} }

func (e *events) add(_ context.Context, event string, n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[event] += n
}

func (e *events) get(event string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[event]
}

func spec(image, command string) job.Spec {
	return job.Spec{ID: testsvc.Unique("j"), Image: image, Command: command}
}

// actions lists the attempts' actions.
func actions(res healer.Result) []job.Action {
	var out []job.Action
	for _, a := range res.Attempts {
		out = append(out, a.Action)
	}
	return out
}

// logAttempts shows the attempts as the job result carries them (-v).
func logAttempts(t *testing.T, res healer.Result) {
	t.Helper()
	b, _ := json.MarshalIndent(res.Attempts, "", "  ")
	t.Logf("attempts: %s", b)
}
