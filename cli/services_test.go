package cli

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// The tests run the command in-process, one at a time: run sets
// process-wide state (go-redis's logger, the otel globals, env lookups).

// syncBuffer is the command's stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runCLI runs paddock with args and returns its exit code and stderr.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, _, stderr := runCLIOut(t, args...)
	return code, stderr
}

// runCLIOut runs paddock with args and returns its exit code, stdout and
// stderr.
func runCLIOut(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut syncBuffer
	code = Run(ctx, args, &out, &errOut)
	t.Logf("paddock %q → exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// tripwire is a listener that counts the connections it gets and closes
// each at once: where a service URL points in a test that must not
// connect anywhere.
type tripwire struct {
	ln    net.Listener
	count atomic.Int64
}

func newTripwire(t *testing.T, network string) *tripwire {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "trip.sock")
	}
	ln, err := net.Listen(network, addr)
	require.NoError(t, err)
	tw := &tripwire{ln: ln}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tw.count.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return tw
}

// services points every service of a command at tripwires: NATS, Redis
// and (through DOCKER_HOST) the Docker engine.
type services struct{ nats, redis, docker *tripwire }

func tripServices(t *testing.T) *services {
	s := &services{nats: newTripwire(t, "tcp"), redis: newTripwire(t, "tcp"), docker: newTripwire(t, "unix")}
	t.Setenv("DOCKER_HOST", "unix://"+s.docker.ln.Addr().String())
	return s
}

func (s *services) flags() []string {
	return []string{"--nats-url", "nats://" + s.nats.ln.Addr().String(), "--redis-url", "redis://" + s.redis.ln.Addr().String()}
}

func (s *services) connections() int64 {
	return s.nats.count.Load() + s.redis.count.Load() + s.docker.count.Load()
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A bad cap stops a service before it connects to anything, with a
// message that names the flag and what it allows.
func TestBadCapsFlagsStopTheProcess(t *testing.T) {
	cases := []struct {
		name string
		args []string
		msgs []string
	}{
		{"memory below the floor", []string{"scheduler", "--max-memory-mb", itoa(job.MinMemoryMB - 1)},
			[]string{"invalid operator caps: --max-memory-mb: " + itoa(job.MinMemoryMB-1) + " is out of range; allowed " + itoa(job.MinMemoryMB) + " MiB or more"}},
		{"memory zero", []string{"worker", "--max-memory-mb", "0"},
			[]string{"--max-memory-mb: 0 is out of range; allowed " + itoa(job.MinMemoryMB) + " MiB or more"}},
		{"pids below the floor", []string{"worker", "--max-pids", itoa(job.MinPids - 1)},
			[]string{"--max-pids: " + itoa(job.MinPids-1) + " is out of range; allowed " + itoa(job.MinPids) + " or more"}},
		{"negative job timeout", []string{"up", "--max-job-timeout", "-5s"},
			[]string{"--max-job-timeout: -5s is out of range; allowed 1s or more"}},
		{"sub-second job timeout", []string{"scheduler", "--max-job-timeout", "1500ms"},
			[]string{"--max-job-timeout: 1.5s is not a whole number of seconds"}},
		{"cpus below the floor", []string{"scheduler", "--max-cpus", "0.001"},
			[]string{"--max-cpus: 0.001 is out of range; allowed 0.01 or more"}},
		{"empty image list", []string{"worker", "--images", ""},
			[]string{"--images: the list is empty; name at least one image"}},
		{"bad image", []string{"scheduler", "--images", "a b"},
			[]string{`--images: image "a b" must be non-empty without spaces`}},
		{"bad queue", []string{"up", "--queues", "Fast"},
			[]string{`--queues: queue "Fast" must match`}},
		{"retention shorter than a job's tries", []string{"scheduler", "--result-retention", "2h"},
			[]string{"--result-retention 2h0m0s is shorter than a job can live (--max-retry 3 + 1 tries × --max-job-timeout 1h0m0s = 4h0m0s)"}},
		{"retention shorter than the dedupe window", []string{"worker", "--result-retention", "1h", "--max-job-timeout", "10m", "--dedupe-window", "2h"},
			[]string{"--result-retention 1h0m0s is shorter than --dedupe-window 2h0m0s"}},
		{"every problem at once", []string{"scheduler", "--max-pids", "1", "--max-memory-mb", "1", "--env-allow", "1X"},
			[]string{"--max-pids: 1 is out of range", "--max-memory-mb: 1 is out of range", `--env-allow: env allowlist entry "1X"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tripServices(t)
			code, out := runCLI(t, append(tc.args, s.flags()...)...)
			assert.Equal(t, exitFailure, code)
			for _, m := range tc.msgs {
				assert.Contains(t, out, m)
			}
			assert.Zero(t, s.connections(), "nothing was connected to")
		})
	}

	t.Run("from the environment", func(t *testing.T) {
		s := tripServices(t)
		t.Setenv("PADDOCK_MAX_PIDS", "3")
		code, out := runCLI(t, append([]string{"scheduler"}, s.flags()...)...)
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, out, "--max-pids: 3 is out of range")
		assert.Zero(t, s.connections())
	})

	// The control: with good flags the same commands do connect (and
	// fail on the tripwire), so the zero counts above mean something.
	for _, cmd := range []string{"scheduler", "worker"} {
		t.Run("good flags connect: "+cmd, func(t *testing.T) {
			s := tripServices(t)
			code, out := runCLI(t, append([]string{cmd, "--max-pids", itoa(job.MinPids)}, s.flags()...)...)
			assert.Equal(t, exitFailure, code)
			assert.NotContains(t, out, "invalid operator caps")
			assert.NotZero(t, s.connections())
		})
	}
}

// A heartbeat TTL that does not outlast the watchdog by
// worker.WatchdogMargin stops a worker before it connects to anything.
func TestHeartbeatTTLBelowTheWatchdogStopsTheWorker(t *testing.T) {
	for _, cmd := range []string{"worker", "up"} {
		t.Run(cmd, func(t *testing.T) {
			s := tripServices(t)
			code, out := runCLI(t, append([]string{cmd, "--watchdog", "7s", "--heartbeat-ttl", "8s"}, s.flags()...)...)
			assert.Equal(t, exitFailure, code)
			assert.Contains(t, out, "--heartbeat-ttl 8s must be at least --watchdog 7s + 2s")
			assert.Zero(t, s.connections())
		})
	}
	t.Run("control: the margin is enough", func(t *testing.T) {
		s := tripServices(t)
		code, out := runCLI(t, append([]string{"worker", "--watchdog", "6s", "--heartbeat-ttl", "8s"}, s.flags()...)...)
		assert.Equal(t, exitFailure, code, "fails on a tripwire, past the flag checks")
		assert.NotContains(t, out, "--heartbeat-ttl")
		assert.NotZero(t, s.connections())
	})
}

// An API key configured for a plain-http, non-loopback LLM endpoint stops
// the worker before it connects to anything (or sends the key).
func TestLLMKeyOverPlainHTTPStopsTheWorker(t *testing.T) {
	s := tripServices(t)
	t.Setenv("PADDOCK_LLM_API_KEY", "sk-Key0Marker")
	code, out := runCLI(t, append([]string{"worker", "--llm-url", "http://llm.example.invalid/v1", "--llm-model", "m"}, s.flags()...)...)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, out, "--llm-url")
	assert.Contains(t, out, "only over https or to a loopback address")
	assert.NotContains(t, out, "sk-Key0Marker")
	assert.Zero(t, s.connections())

	t.Run("loopback is allowed", func(t *testing.T) {
		s := tripServices(t)
		t.Setenv("PADDOCK_LLM_API_KEY", "sk-Key0Marker")
		code, out := runCLI(t, append([]string{"worker", "--llm-url", "http://127.0.0.1:8000/v1", "--llm-model", "m"}, s.flags()...)...)
		assert.Equal(t, exitFailure, code, "fails on the Docker tripwire, past the flag checks")
		assert.NotContains(t, out, "only over https")
		assert.NotZero(t, s.connections())
	})
}

// A malformed service URL is refused before anything connects, and the
// message never quotes its password, even where the URL parser would.
func TestBadURLNeverPrintsThePassword(t *testing.T) {
	cases := []struct {
		name string
		args []string
		flag string
	}{
		{"redis bad port", []string{"scheduler", "--redis-url", "redis://:Mk1Secret@127.0.0.1:notaport/0"}, "--redis-url"},
		{"redis slash in password", []string{"worker", "--redis-url", "redis://u:Mk1Secret/Mk2Secret@127.0.0.1:6379"}, "--redis-url"},
		{"redis digit password cut by a path", []string{"scheduler", "--redis-url", "redis://u:12/Mk2Secret@127.0.0.1"}, "--redis-url"},
		{"redis bad scheme", []string{"up", "--redis-url", "redix://u:Mk1Secret@127.0.0.1:6379"}, "--redis-url"},
		{"nats bad port", []string{"scheduler", "--nats-url", "nats://u:Mk1Secret@127.0.0.1:bad"}, "--nats-url"},
		{"nats token, control character", []string{"worker", "--nats-url", "nats://Mk1Secret@127.0.0.1\n:4222"}, "--nats-url"},
		{"submit: nats bad port", []string{"submit", "--nats-url", "nats://u:Mk1Secret@127.0.0.1:bad", "--", "echo hi"}, "--nats-url"},
		{"cancel: nats bad port", []string{"cancel", "--nats-url", "tls://u:Mk1Secret@127.0.0.1:bad", "some-job"}, "--nats-url"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tripServices(t)
			args := append(append([]string(nil), tc.args[:1]...), s.flags()...)
			args = append(args, tc.args[1:]...) // the bad URL overrides the tripwire's
			code, out := runCLI(t, args...)
			assert.Equal(t, exitFailure, code)
			assert.Contains(t, out, tc.flag)
			assert.Contains(t, out, "is not a valid URL")
			assert.NotContains(t, out, "Mk1Secret")
			assert.NotContains(t, out, "Mk2Secret")
			assert.Zero(t, s.connections())
		})
	}
}

// Real servers refusing a wrong password: the connect errors name the
// URL, redacted.
func TestConnectErrorsRedactTheURL(t *testing.T) {
	ns := startAuthNATS(t)
	open := testsvc.StartNATS(t)
	rs := testsvc.StartRedis(t)
	rdb := rs.Client()
	require.NoError(t, rdb.ConfigSet(context.Background(), "requirepass", "right-pw").Err())
	require.NoError(t, rdb.Close())

	t.Run("NATS", func(t *testing.T) {
		code, out := runCLI(t, "scheduler", "--nats-url", "nats://u:Mk1Secret@"+ns.String(), "--redis-url", "unix://:right-pw@"+rs.Addr)
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, out, "NATS at nats://u:xxxxx@"+ns.String())
		assert.NotContains(t, out, "Mk1Secret")
	})
	t.Run("Redis", func(t *testing.T) {
		code, out := runCLI(t, "scheduler", "--nats-url", open.URL, "--redis-url", "unix://:Mk1Secret@"+rs.Addr)
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, out, "connect to Redis at unix://:xxxxx@"+rs.Addr)
		assert.Contains(t, out, "WRONGPASS")
		assert.NotContains(t, out, "Mk1Secret")
	})
	t.Run("NATS token", func(t *testing.T) {
		code, out := runCLI(t, "submit", "--nats-url", "nats://Mk1Secret@"+ns.String(), "--", "echo hi")
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, out, "NATS at nats://xxxxx@"+ns.String())
		assert.NotContains(t, out, "Mk1Secret")
	})
	// `up` logs the URLs of the services it finds (here with the right
	// passwords), then stops on a bad --metrics-addr.
	t.Run("up logs", func(t *testing.T) {
		code, out := runCLI(t, "up", "--nats-url", "nats://u:right-pw@"+ns.String(), "--redis-url", "unix://:right-pw@"+rs.Addr,
			"--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:notaport")
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, out, "using NATS")
		assert.Contains(t, out, "using Redis")
		assert.Contains(t, out, "--metrics-addr")
		assert.Contains(t, out, "nats://u:xxxxx@")
		assert.NotContains(t, out, "right-pw")
	})
}

// startAuthNATS starts an embedded NATS server with JetStream that takes
// user u, password right-pw.
func startAuthNATS(t *testing.T) net.Addr {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		Username: "u", Password: "right-pw", NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats server not ready")
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.Addr()
}

func TestRedisOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		url, network, addr, password string
		db                           int
	}{
		{"redis://127.0.0.1:6379", "tcp", "127.0.0.1:6379", "", 0},
		{"redis://:pw@h:6380/2", "tcp", "h:6380", "pw", 2},
		{"unix:///run/redis.sock", "unix", "/run/redis.sock", "", 0},
		{"unix://relative/redis.sock", "unix", "relative/redis.sock", "", 0},
		{"unix://:pw@/run/redis.sock?db=3", "unix", "/run/redis.sock", "pw", 3},
	}
	for _, tc := range cases {
		u, err := parseRedisURL(tc.url)
		require.NoError(t, err, tc.url)
		opt := u.Single
		assert.Equal(t, tc.network, opt.Network, tc.url)
		assert.Equal(t, tc.addr, opt.Addr, tc.url)
		assert.Equal(t, tc.password, opt.Password, tc.url)
		assert.Equal(t, tc.db, opt.DB, tc.url)
	}
}
