package deploy_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/paddockhq/paddock/internal/asynqx"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// composeRun configures TestCompose. The defaults are a short run (`go test
// ./deploy/`); `make test-compose`, which `make test` runs after the Go
// suite, sets the full one through the environment:
//
//	PADDOCK_COMPOSE_JOBS=200      jobs to submit (default 20)
//	PADDOCK_COMPOSE_KILL=1        docker kill one worker once a quarter of
//	                              the jobs are done (default off)
//	PADDOCK_COMPOSE_WORKERS=3     --scale worker=N (default 3)
//	PADDOCK_COMPOSE_ROOT_WORKER=1 run the workers as the compose default
//	                              (root without capabilities) instead of
//	                              uid 65532 + the socket's group
//	PADDOCK_COMPOSE_NO_BUILD=1    use the images as they are (the make
//	                              target has just built them)
//	PADDOCK_COMPOSE_REPORT=FILE   write the measurements as JSON
type composeRun struct {
	jobs, workers int
	kill          bool
	rootWorker    bool
	build         bool
	report        string
}

func composeRunFromEnv(t *testing.T) composeRun {
	r := composeRun{jobs: 20, workers: 3, build: true}
	num := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, name)
			require.Positive(t, n, name)
			*dst = n
		}
	}
	num("PADDOCK_COMPOSE_JOBS", &r.jobs)
	num("PADDOCK_COMPOSE_WORKERS", &r.workers)
	r.kill = os.Getenv("PADDOCK_COMPOSE_KILL") == "1"
	r.rootWorker = os.Getenv("PADDOCK_COMPOSE_ROOT_WORKER") == "1"
	r.build = os.Getenv("PADDOCK_COMPOSE_NO_BUILD") != "1"
	r.report = os.Getenv("PADDOCK_COMPOSE_REPORT")
	if r.kill {
		require.GreaterOrEqual(t, r.workers, 2, "killing a worker needs another one to finish its jobs")
	}
	return r
}

// compose is one compose project on the local engine.
type compose struct {
	t       *testing.T
	root    string   // repository root (docker-compose.yml)
	files   []string // compose files under root; none: docker-compose.yml
	project string
	env     []string
	natsURL string
	redis   string // host:port
	gateway string // base URL of the published gateway
	image   string // the paddock image
	creds   composeCreds

	mu     sync.Mutex
	owners map[string]bool // worker ids = sandbox owner labels seen
}

// composeCreds are the credentials the test takes out of the fleet's auth
// volume, as `make compose-creds` does.
type composeCreds struct {
	dev, admin    string // .creds files: the dev tenant's (0600, uid 65532), the admin's
	redisPassword string
	devToken      string // the dev tenant's bearer token for the gateway
}

// TestCompose brings up docker-compose.yml with several workers on this
// host's engine, checks that NATS and Redis refuse clients without
// credentials, runs jobs as the dev tenant through the published NATS port
// with the CLI of the deployed image, optionally kills a worker mid-run,
// checks that every job has exactly one terminal result, runs a job through
// the gateway's HTTP API with the dev tenant's bearer token, and takes the
// stack down leaving no container behind.
func TestCompose(t *testing.T) {
	run := composeRunFromEnv(t)
	c := newCompose(t, run)
	if run.build {
		c.buildImages()
	}

	t0 := time.Now()
	c.up(run.workers)
	upTook := time.Since(t0)
	c.waitHealthy(run.workers, 3*time.Minute)
	healthyTook := time.Since(t0)
	t.Logf("stack up in %s, healthy in %s (%d workers)", upTook.Round(time.Millisecond), healthyTook.Round(time.Millisecond), run.workers)
	c.recordOwners()
	c.creds = c.copyCreds()
	c.checkAuthRequired()

	// The test's own checks read the streams: the admin user may.
	nc, err := nats.Connect(c.natsURL, nats.Timeout(5*time.Second), nats.UserCredentials(c.creds.admin))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	// The batch: each job echoes its number; with a kill, each also sleeps
	// half a second so the victim surely holds jobs when it dies.
	var jobs bytes.Buffer
	for i := 1; i <= run.jobs; i++ {
		cmd := fmt.Sprintf("echo job-%d", i)
		if run.kill {
			cmd = "sleep 0.5; " + cmd
		}
		line, _ := json.Marshal(map[string]any{"command": cmd, "labels": map[string]string{"n": strconv.Itoa(i)}})
		jobs.Write(append(line, '\n'))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var killed string
	var killedAt time.Duration // after submitStart
	killDone := make(chan struct{})
	submitStart := time.Now()
	if run.kill {
		go func() {
			defer close(killDone)
			killed, killedAt = c.killWorkerAfter(ctx, js, run.jobs/4, submitStart)
		}()
	} else {
		close(killDone)
	}
	results := c.submit(ctx, jobs.Bytes(), 12*time.Minute)
	wall := time.Since(submitStart)
	<-killDone

	c.checkResults(ctx, js, run, results, killed, submitStart.Add(killedAt))

	// Throughput: submit of the first job to the end of the last one.
	var first, last time.Time
	runs := map[int]int{}
	perWorker := map[string]int{}
	for _, r := range results {
		if first.IsZero() || r.SubmittedAt.Before(first) {
			first = r.SubmittedAt
		}
		if r.FinishedAt.After(last) {
			last = r.FinishedAt
		}
		runs[r.Runs]++
		perWorker[r.Worker]++
	}
	span := last.Sub(first)
	rate := float64(len(results)) / span.Seconds()
	t.Logf("%d jobs in %s (CLI wall %s): %.2f jobs/s with %d workers; runs per job %v; per worker %v",
		len(results), span.Round(time.Millisecond), wall.Round(time.Millisecond), rate, run.workers, runs, perWorker)
	// Without the re-runs, which wait for asynq's lease expiry: the rate
	// the fleet sustained.
	var steadyLast time.Time
	steadyN := 0
	var rerunLast time.Time
	for _, r := range results {
		if r.Runs <= 1 {
			steadyN++
			if r.FinishedAt.After(steadyLast) {
				steadyLast = r.FinishedAt
			}
		} else if r.FinishedAt.After(rerunLast) {
			rerunLast = r.FinishedAt
		}
	}
	steadyRate := float64(steadyN) / steadyLast.Sub(first).Seconds()
	var recovery time.Duration
	if run.kill {
		recovery = rerunLast.Sub(submitStart.Add(killedAt))
		t.Logf("killed %s at %s; its %d jobs re-ran and ended %s after the kill; the other %d jobs: %.2f jobs/s",
			killed, killedAt.Round(time.Millisecond), run.jobs-steadyN, recovery.Round(time.Millisecond), steadyN, steadyRate)
	}

	// After the batch's checks, which count every result in the stream.
	c.checkGateway(ctx)

	downStart := time.Now()
	c.down()
	downTook := time.Since(downStart)
	t.Logf("down in %s, no container left", downTook.Round(time.Millisecond))

	if run.report != "" {
		rep, _ := json.MarshalIndent(map[string]any{
			"jobs": run.jobs, "workers": run.workers, "kill": run.kill, "killed": killed,
			"killed_after_s": killedAt.Seconds(), "up_s": upTook.Seconds(), "healthy_s": healthyTook.Seconds(),
			"span_s": span.Seconds(), "cli_wall_s": wall.Seconds(), "jobs_per_s": rate,
			"first_run_jobs_per_s": steadyRate, "rerun_done_after_kill_s": recovery.Seconds(),
			"runs_per_job": runs, "per_worker": perWorker, "down_s": downTook.Seconds(),
		}, "", "  ")
		require.NoError(t, os.WriteFile(run.report, append(rep, '\n'), 0o644))
	}
}

// composeGateway is the part of docker-compose.yml TestComposeGatewayWiring reads.
type composeGateway struct {
	Services map[string]struct {
		Command     []string          `json:"command"`
		Entrypoint  []string          `json:"entrypoint"`
		User        string            `json:"user"`
		Environment map[string]string `json:"environment"`
		Volumes     []string          `json:"volumes"`
		Ports       []string          `json:"ports"`
		Healthcheck struct {
			Test []string `json:"test"`
		} `json:"healthcheck"`
		DependsOn map[string]struct {
			Condition string `json:"condition"`
		} `json:"depends_on"`
	} `json:"services"`
}

// TestComposeGatewayWiring: the gateway runs `paddock gateway` as 65532 on
// every interface of its container, published on 127.0.0.1 only, checked on
// /healthz; it reads its NATS user and signing key from auth-gateway
// (read-only), which `auth` fills with 0600 copies owned by that user; it
// mounts no signing keys, no Docker socket and no Redis password; it starts
// after NATS is healthy and dev-tenant (the tokens bucket, the dev token)
// is done. TestCompose runs it for real.
func TestComposeGatewayWiring(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	require.NoError(t, err)
	var cf composeGateway
	require.NoError(t, yaml.Unmarshal(raw, &cf))
	gw, ok := cf.Services["gateway"]
	require.True(t, ok, "docker-compose.yml: no service gateway")
	assert.Equal(t, []string{"gateway"}, gw.Command)
	assert.Equal(t, "65532:65532", gw.User, "gateway: non-root")

	mounts := map[string]string{}
	for _, v := range gw.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		mounts[src] = dst
		assert.NotContains(t, v, "docker.sock", "gateway: needs no Docker socket")
	}
	assert.NotContains(t, mounts, "auth", "gateway: mounts the signing keys of the volume auth")
	dir, ro := strings.CutSuffix(mounts["auth-gateway"], ":ro")
	require.True(t, ro, "gateway: auth-gateway read-only (got %q)", mounts["auth-gateway"])
	env := gw.Environment
	assert.Equal(t, dir+"/nats.creds", env["PADDOCK_CREDS"], "gateway: PADDOCK_CREDS in auth-gateway")
	assert.Equal(t, dir+"/gateway.nk", env["PADDOCK_GATEWAY_SIGNING_KEY"], "gateway: the signing key in auth-gateway")
	for k := range env {
		assert.False(t, strings.HasPrefix(k, "PADDOCK_REDIS"), "gateway: %s (it needs no Redis)", k)
	}

	addr := env["PADDOCK_GATEWAY_ADDR"]
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, "gateway: PADDOCK_GATEWAY_ADDR %q", addr)
	assert.Contains(t, []string{"", "0.0.0.0", "::"}, host, "gateway: PADDOCK_GATEWAY_ADDR must listen beyond the container's loopback")
	require.Len(t, gw.Ports, 1, "gateway: one published port")
	assert.Regexp(t, `^127\.0\.0\.1:\$\{GATEWAY_PORT:-8080\}:`+port+`$`, gw.Ports[0], "gateway: published on the host's 127.0.0.1 only")
	assert.Contains(t, strings.Join(gw.Healthcheck.Test, " "), "http://127.0.0.1:"+port+"/healthz", "gateway: health check")
	for svc, cond := range map[string]string{"nats": "service_healthy", "dev-tenant": "service_completed_successfully",
		"auth": "service_completed_successfully", "tools": "service_completed_successfully"} {
		assert.Equal(t, cond, gw.DependsOn[svc].Condition, "gateway: depends_on %s", svc)
	}

	// auth copies the gateway's user and key into auth-gateway for its user.
	auth := cf.Services["auth"]
	script := strings.Join(auth.Entrypoint, " ")
	var to string
	for _, v := range auth.Volumes {
		if src, dst, _ := strings.Cut(v, ":"); src == "auth-gateway" {
			to = dst
		}
	}
	require.NotEmpty(t, to, "auth: does not mount auth-gateway")
	assert.Contains(t, script, "put $$a/creds/gateway.creds "+to+"/nats.creds \"$$GATEWAY_USER\"", "auth: copies the gateway's creds")
	assert.Contains(t, script, "put $$a/gateway.nk "+to+"/gateway.nk \"$$GATEWAY_USER\"", "auth: copies the gateway's key")
	assert.Equal(t, gw.User, auth.Environment["GATEWAY_USER"], "auth: the copies' owner is the gateway's user")
	assert.Contains(t, strings.Join(cf.Services["dev-tenant"].Entrypoint, " "), "tenant token dev",
		"dev-tenant: creates the tokens bucket and the dev token")
}

func newCompose(t *testing.T, run composeRun) *compose {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("TestCompose needs root (the Docker socket, images built with mmdebstrap): run it through `make test`")
	}
	for _, tool := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: `apt-get install -y docker-compose` (Debian 12's docker-compose 1.29; `make test-compose` installs it)", tool)
		}
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "docker-compose.yml"))

	c := &compose{t: t, root: root, project: "pdkct" + randomSuffix(), owners: map[string]bool{}}
	natsPort, redisPort, gatewayPort := freePort(t), freePort(t), freePort(t)
	c.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	c.redis = fmt.Sprintf("127.0.0.1:%d", redisPort)
	c.gateway = fmt.Sprintf("http://127.0.0.1:%d", gatewayPort)
	c.image = envOr("PADDOCK_IMAGE", "paddock/paddock:latest")
	// The init directory is this test's own: another fleet on this host
	// keeps its /var/lib/paddock/init.
	initDir, err := os.MkdirTemp("", "paddock-compose-init-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(initDir, 0o755)) // a non-root worker must reach the init
	t.Cleanup(func() { os.RemoveAll(initDir) })
	c.env = append(os.Environ(),
		"COMPOSE_PROJECT_NAME="+c.project,
		"NATS_PORT="+strconv.Itoa(natsPort),
		"REDIS_PORT="+strconv.Itoa(redisPort),
		"GATEWAY_PORT="+strconv.Itoa(gatewayPort),
		"PADDOCK_INIT_DIR="+initDir,
		// paddock/test (4 MB) is always built by `make test`.
		"PADDOCK_IMAGES="+envOr("PADDOCK_COMPOSE_SANDBOX_IMAGES", "paddock/test:latest"),
	)
	if !run.rootWorker {
		// The hardened worker: uid 65532 with the socket's group.
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat("/var/run/docker.sock", &st), "the Docker socket")
		c.env = append(c.env, "PADDOCK_WORKER_USER=65532:65532", "DOCKER_GID="+strconv.Itoa(int(st.Gid)))
	}
	return c
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func randomSuffix() string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// cmd runs a command in the repository root with the project's environment
// and returns its combined output.
func (c *compose) cmd(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = c.root, c.env
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s %s: timed out after %s: %w", name, strings.Join(args, " "), timeout, err)
	}
	return string(out), err
}

func (c *compose) compose(timeout time.Duration, args ...string) (string, error) {
	return c.cmd(timeout, "docker-compose", c.composeArgs(args...)...)
}

func (c *compose) composeArgs(args ...string) []string {
	files := c.files
	if len(files) == 0 {
		files = []string{"docker-compose.yml"}
	}
	var base []string
	for _, f := range files {
		base = append(base, "-f", filepath.Join(c.root, f))
	}
	base = append(base, "--project-directory", c.root, "--ansi", "never")
	return append(base, args...)
}

// authFile returns a file of the fleet's auth volume (under /state/auth), read
// the way `make compose-creds` reads it: the one-shot auth service's mounts.
func (c *compose) authFile(name string) []byte {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-compose", c.composeArgs("run", "--rm", "--no-deps", "-T",
		"--entrypoint", "/tools/busybox", "auth", "cat", "/state/auth/"+name)...)
	cmd.Dir, cmd.Env = c.root, c.env
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(c.t, cmd.Run(), "read %s from the auth volume: %s", name, stderr.String())
	require.NotEmpty(c.t, stdout.Bytes(), name)
	return stdout.Bytes()
}

// copyCreds copies the dev tenant's and the admin's credentials and the
// Redis password out of the auth volume. The dev creds are owned by 65532:
// the CLI container that submits runs as that user.
func (c *compose) copyCreds() composeCreds {
	c.t.Helper()
	dir := c.t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(c.t, os.WriteFile(p, data, 0o600))
		return p
	}
	cr := composeCreds{
		dev:           write("dev.creds", c.authFile("creds/dev.creds")),
		admin:         write("admin.creds", c.authFile("creds/admin.creds")),
		redisPassword: strings.TrimSpace(string(c.authFile("redis.password"))),
		// dev-tenant issued it (make compose-creds copies it the same way).
		devToken: strings.TrimSpace(string(c.authFile("dev.token"))),
	}
	require.NoError(c.t, os.Chown(cr.dev, 65532, 65532))
	require.NotEmpty(c.t, cr.redisPassword)
	return cr
}

// checkAuthRequired: NATS refuses a client without credentials, and Redis
// answers NOAUTH to one without the password (WRONGPASS to a wrong one).
func (c *compose) checkAuthRequired() {
	t := c.t
	t.Helper()
	nc, err := nats.Connect(c.natsURL, nats.Timeout(5*time.Second), nats.NoReconnect())
	if err == nil {
		nc.Close()
	}
	assert.ErrorIs(t, err, nats.ErrAuthorization, "an anonymous NATS connection must be refused")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, o := range []*redis.Options{
		{Addr: c.redis},
		{Addr: c.redis, Password: "not-the-password"},
		{Addr: c.redis, Username: "paddock", Password: "not-the-password"},
	} {
		rdb := redis.NewClient(o)
		err := rdb.Ping(ctx).Err()
		rdb.Close()
		if assert.Error(t, err, "redis without the password (user %q)", o.Username) {
			assert.Regexp(t, `^(NOAUTH|WRONGPASS) `, err.Error(), "redis without the password")
		}
	}
	rdb := c.redisClient()
	defer rdb.Close()
	require.NoError(t, rdb.Ping(ctx).Err(), "redis with the password of the auth volume")
}

// redisClient connects to the published Redis as the services do.
func (c *compose) redisClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: c.redis, Username: "paddock", Password: c.creds.redisPassword})
}

// buildImages builds the local images the stack uses: paddock from this
// tree (a Go build; quick when cached), the others only when missing.
func (c *compose) buildImages() {
	c.t.Helper()
	t0 := time.Now()
	out, err := c.cmd(20*time.Minute, filepath.Join(c.root, "scripts", "build-images.sh"), "test", "nats", "redis", "paddock")
	require.NoError(c.t, err, "scripts/build-images.sh:\n%s", out)
	// The image must hold a working binary (a failed `go build` inside the
	// script has produced an image without one).
	smoke, err := c.cmd(time.Minute, "docker", "run", "--rm", "--network", "none", c.image, "schema", "spec")
	require.NoError(c.t, err, "%s has no working paddock binary: %s\nbuild-images.sh said:\n%s", c.image, tail(smoke, 500), tail(out, 4000))
	c.t.Logf("images ready in %s", time.Since(t0).Round(time.Millisecond))
}

// up starts the stack. The cleanup it registers takes the stack down and
// removes what is left, whatever happened in between.
func (c *compose) up(workers int) {
	c.t.Helper()
	c.t.Cleanup(c.cleanup)
	out, err := c.compose(5*time.Minute, "up", "-d", "--scale", "worker="+strconv.Itoa(workers))
	if err != nil {
		c.dumpLogs()
	}
	require.NoError(c.t, err, "docker-compose up:\n%s", out)
}

// containers lists the project's containers of service (all if empty):
// id (full), name, health/status.
type ctr struct{ id, name, status string }

func (c *compose) containers(service string) []ctr {
	args := []string{"ps", "-a", "--no-trunc", "--format", "{{.ID}}\t{{.Names}}\t{{.Status}}",
		"--filter", "label=com.docker.compose.project=" + c.project}
	if service != "" {
		args = append(args, "--filter", "label=com.docker.compose.service="+service)
	}
	out, err := c.cmd(time.Minute, "docker", args...)
	require.NoError(c.t, err, out)
	var list []ctr
	for line := range strings.Lines(out) {
		f := strings.SplitN(strings.TrimSpace(line), "\t", 3)
		if len(f) == 3 {
			list = append(list, ctr{f[0], f[1], f[2]})
		}
	}
	return list
}

// waitHealthy waits until every scheduler, worker, the gateway, NATS and
// Redis report healthy (the schedulers' and workers' health checks fetch
// /readyz from --metrics-addr, the gateway's /healthz from its address).
func (c *compose) waitHealthy(workers int, timeout time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var bad []string
	// Each round runs docker ps: once a second.
	if !testsvc.Poll(ctx, time.Second, func() bool {
		healthy, total := 0, 0
		bad = nil
		for _, svc := range []string{"scheduler", "worker", "gateway", "nats", "redis"} {
			for _, ct := range c.containers(svc) {
				total++
				switch {
				case strings.Contains(ct.status, "(healthy)"):
					healthy++
				case strings.HasPrefix(ct.status, "Restarting"), strings.HasPrefix(ct.status, "Exited"):
					c.dumpLogs()
					c.t.Fatalf("%s: %s", ct.name, ct.status)
				default:
					bad = append(bad, ct.name+": "+ct.status)
				}
			}
		}
		return len(c.containers("worker")) == workers && healthy == total
	}) {
		c.dumpLogs()
		c.t.Fatalf("not healthy after %s: %v", timeout, bad)
	}
}

// recordOwners notes the worker ids (the sandbox owner label): the
// container's hostname (its 12-character id) and the process id 1.
func (c *compose) recordOwners() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ct := range c.containers("worker") {
		c.owners[ct.id[:12]+"-1"] = true
	}
}

func (c *compose) ownerList() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for o := range c.owners {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// submit runs `paddock submit --wait` of the deployed image against the
// published NATS port, as the dev tenant, and returns the results it prints.
func (c *compose) submit(ctx context.Context, jobs []byte, wait time.Duration) []job.Result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, wait+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "-i", "--network", "host", "--user", "65532:65532",
		"--label", "com.docker.compose.project="+c.project, // cleaned with the project
		"-v", c.creds.dev+":/creds/dev.creds:ro",
		c.image, "--creds", "/creds/dev.creds", "submit", "--nats-url", c.natsURL, "--file", "-", "--wait",
		"--wait-timeout", wait.String(), "--output", "json")
	cmd.Stdin = bytes.NewReader(jobs)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		c.dumpLogs()
	}
	require.NoError(c.t, err, "paddock submit (exit 2 = a job did not succeed): %s", tail(stderr.String(), 2000))
	var results []job.Result
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r job.Result
		require.NoError(c.t, json.Unmarshal(sc.Bytes(), &r), "result line %q", sc.Text())
		results = append(results, r)
	}
	require.NoError(c.t, sc.Err())
	return results
}

// killWorkerAfter waits until done results exist, then SIGKILLs one worker
// container (docker kill: the restart policy leaves it dead, as a lost
// host would be). Its jobs come back after asynq's lease expiry.
func (c *compose) killWorkerAfter(ctx context.Context, js jetstream.JetStream, done int, start time.Time) (string, time.Duration) {
	testsvc.Poll(ctx, 200*time.Millisecond, func() bool {
		st, err := js.Stream(ctx, job.ResultsStream("dev"))
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs >= uint64(done)
	})
	workers := c.containers("worker")
	if len(workers) == 0 {
		return "", 0
	}
	victim := workers[len(workers)/2]
	out, err := c.cmd(time.Minute, "docker", "kill", victim.id)
	if err != nil {
		c.t.Errorf("docker kill %s: %v %s", victim.name, err, out)
	}
	return victim.id[:12] + "-1", time.Since(start)
}

// checkResults: every job has exactly one terminal result, it succeeded,
// and nothing is left in the queues.
func (c *compose) checkResults(ctx context.Context, js jetstream.JetStream, run composeRun, results []job.Result, killed string, killedAt time.Time) {
	t := c.t
	require.Len(t, results, run.jobs, "one result line per job")
	owners := c.ownerList()
	seenN := map[string]bool{}
	seenID := map[string]bool{}
	reruns := 0
	for _, r := range results {
		n := r.Labels["n"]
		assert.False(t, seenN[n], "job n=%s reported twice", n)
		assert.False(t, seenID[r.ID], "job %s reported twice", r.ID)
		seenN[n], seenID[r.ID] = true, true
		assert.Equal(t, job.StateSucceeded, r.State, "job n=%s: %s %s", n, r.Reason, r.Error)
		assert.Equal(t, "dev", r.Tenant, "job n=%s: the tenant of the credentials", n)
		assert.Contains(t, r.Stdout.Text, "job-"+n, "job n=%s output", n)
		assert.Contains(t, owners, r.Worker, "job n=%s ran on a worker of this project", n)
		if killed != "" && r.Worker == killed {
			assert.True(t, r.FinishedAt.Before(killedAt.Add(time.Second)),
				"job n=%s finished on the killed worker at %s, after its death at %s", n, r.FinishedAt, killedAt)
		}
		if r.Runs > 1 {
			reruns++
		}
	}
	for i := 1; i <= run.jobs; i++ {
		assert.True(t, seenN[strconv.Itoa(i)], "no result for job n=%d", i)
	}
	if run.kill {
		assert.Positive(t, reruns, "the killed worker held no job: nothing was re-run")
	}

	// The results stream stored exactly one message per job: a second
	// terminal result (a re-run finishing again) would have taken another
	// sequence number, even though the stream keeps only the last per job.
	st, err := js.Stream(ctx, job.ResultsStream("dev"))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(run.jobs), info.State.Msgs, "results stored")
	assert.Equal(t, uint64(run.jobs), info.State.LastSeq, "results ever published")
	// A submission leaves its stream when its scheduler acknowledges it:
	// on seeing the job's result, a round trip after the client saw it, or
	// (a result published before the hold began) at the next Redis check.
	jst, err := js.Stream(ctx, job.JobsStream("dev"))
	require.NoError(t, err)
	left := func() uint64 {
		jinfo, err := jst.Info(ctx)
		if err != nil {
			return 1 << 63
		}
		return jinfo.State.Msgs
	}
	assert.Eventually(t, func() bool { return left() == 0 }, 30*time.Second, 50*time.Millisecond,
		"submissions left in %s: %d", job.JobsStream("dev"), left())

	// Redis: the authoritative result of each job, and empty queues.
	rdb := c.redisClient()
	defer rdb.Close()
	for _, r := range results {
		raw, err := rdb.Get(ctx, "paddock:result:"+r.Key()).Bytes()
		if assert.NoError(t, err, "stored result of %s", r.ID) {
			var stored job.Result
			require.NoError(t, json.Unmarshal(raw, &stored))
			assert.Equal(t, r.State, stored.State, r.ID)
			assert.Equal(t, r.Worker, stored.Worker, r.ID)
		}
	}
	// The queues empty out: at once without a kill; with one, the killed
	// worker's tasks (their jobs rescued) leave asynq's active list once
	// their lease expired (30 s after the worker's last lease extension,
	// plus the rescuer's RetireMargin and a pass), not at asynq's recoverer
	// a minute or two later.
	deadline := time.Now().Add(5 * time.Second)
	if run.kill {
		deadline = killedAt.Add(30*time.Second + asynqx.RetireMargin + 15*time.Second)
	}
	var busy string
	qctx, qcancel := context.WithDeadline(ctx, deadline)
	testsvc.Poll(qctx, 200*time.Millisecond, func() bool { busy = queuesBusy(ctx, t, rdb); return busy == "" })
	qcancel()
	assert.Empty(t, busy, "asynq's queues are not empty")
	if run.kill {
		c.checkRetired(t, rdb, results)
	}
}

// checkRetired: the original task of every re-run job was retired by the
// rescuer (completed, never retried), not recovered by asynq's recoverer
// (which retries it first: Retried 1, "lease expired"), so the queues
// emptied without waiting for it.
func (c *compose) checkRetired(t *testing.T, rdb *redis.Client, results []job.Result) {
	insp := asynq.NewInspectorFromRedisClient(rdb)
	for _, r := range results {
		if r.Runs < 2 {
			continue
		}
		info, err := insp.GetTaskInfo(cmp.Or(r.Queue, job.DefaultQueue), r.Key())
		if !assert.NoError(t, err, "the original task of re-run job %s", r.ID) {
			continue
		}
		assert.Equal(t, asynq.TaskStateCompleted, info.State, "the original task of re-run job %s", r.ID)
		assert.Zero(t, info.Retried, "asynq's recoverer, not the rescuer, took the original task of %s out of active (%s)", r.ID, info.LastErr)
	}
}

// queuesBusy names the asynq lists and sets of rdb that hold a task ("":
// none).
func queuesBusy(ctx context.Context, t *testing.T, rdb *redis.Client) string {
	queues, err := rdb.SMembers(ctx, "asynq:queues").Result()
	require.NoError(t, err)
	var busy []string
	for _, q := range queues {
		p := "asynq:{" + q + "}:"
		for _, k := range []string{"pending", "active"} {
			if n := rdb.LLen(ctx, p+k).Val(); n != 0 {
				busy = append(busy, fmt.Sprintf("%s%s: %d", p, k, n))
			}
		}
		for _, k := range []string{"lease", "scheduled", "retry", "archived"} {
			if n := rdb.ZCard(ctx, p+k).Val(); n != 0 {
				busy = append(busy, fmt.Sprintf("%s%s: %d", p, k, n))
			}
		}
	}
	return strings.Join(busy, ", ")
}

// down takes the stack down (workers drain) and checks that no container of
// the project and no sandbox of its workers is left.
func (c *compose) down() {
	c.t.Helper()
	out, err := c.compose(5*time.Minute, "down", "-v", "--timeout", "90")
	require.NoError(c.t, err, "docker-compose down:\n%s", out)
	// A killed worker's sandboxes end on their own (paddock-init exits when
	// its stdin closes, and they are auto-removed): give them a moment.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var left []string
	// Each round runs docker ps: once a second.
	if !testsvc.Poll(ctx, time.Second, func() bool { left = c.leftovers(); return len(left) == 0 }) {
		c.t.Errorf("left after down: %v", left)
	}
}

// leftovers lists the project's containers and the sandboxes of its
// workers (label io.paddock.managed=1, owner one of the worker ids).
func (c *compose) leftovers() []string {
	var left []string
	for _, ct := range c.containers("") {
		left = append(left, ct.name)
	}
	out, err := c.cmd(time.Minute, "docker", "ps", "-a", "--filter", "label=io.paddock.managed=1",
		"--format", "{{.ID}}\t{{.Names}}\t{{.Label \"io.paddock.owner\"}}")
	require.NoError(c.t, err, out)
	owners := c.ownerList()
	for line := range strings.Lines(out) {
		f := strings.SplitN(strings.TrimSpace(line), "\t", 3)
		if len(f) == 3 && slices.Contains(owners, f[2]) {
			left = append(left, f[1])
		}
	}
	return left
}

// cleanup runs whatever the test did: down, then force-remove leftovers.
func (c *compose) cleanup() {
	if out, err := c.compose(5*time.Minute, "down", "-v", "--timeout", "30"); err != nil {
		c.t.Logf("cleanup: docker-compose down: %v\n%s", err, out)
	}
	var ids []string
	for _, ct := range c.containers("") {
		ids = append(ids, ct.id)
	}
	out, _ := c.cmd(time.Minute, "docker", "ps", "-a", "--no-trunc", "--filter", "label=io.paddock.managed=1",
		"--format", "{{.ID}} {{.Label \"io.paddock.owner\"}}")
	owners := c.ownerList()
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) == 2 && slices.Contains(owners, f[1]) {
			ids = append(ids, f[0])
		}
	}
	if len(ids) > 0 {
		out, err := c.cmd(time.Minute, "docker", append([]string{"rm", "-f"}, ids...)...)
		c.t.Logf("cleanup: removed %d leftover containers (%v) %s", len(ids), err, out)
	}
}

// checkGateway: the published gateway answers /healthz, refuses a job
// without a bearer token or with a token it never issued (401), and with the
// dev tenant's token runs one (POST /v1/jobs?wait=60s) to its result.
func (c *compose) checkGateway(ctx context.Context) {
	t := c.t
	t.Helper()
	hc := &http.Client{Timeout: 90 * time.Second}
	do := func(bearer, body string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+"/v1/jobs?wait=60s", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err, "POST %s/v1/jobs", c.gateway)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.gateway+"/healthz", nil)
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err, "the gateway on %s (GATEWAY_PORT)", c.gateway)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "GET /healthz: %s", b)

	const spec = `{"command":"echo hi"}`
	resp, b = do("", spec)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a job without a token: %s", b)
	resp, b = do("pdk_"+strings.Repeat("a", 52), spec)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a job with a token the gateway never issued: %s", b)

	require.True(t, strings.HasPrefix(c.creds.devToken, "pdk_"), "auth/dev.token holds no bearer token: %q", c.creds.devToken)
	t0 := time.Now()
	resp, b = do(c.creds.devToken, spec)
	took := time.Since(t0)
	if !assert.Equal(t, http.StatusOK, resp.StatusCode, "POST /v1/jobs?wait=60s with the dev token: %s", b) {
		c.dumpLogs()
		return
	}
	var r job.Result
	require.NoError(t, json.Unmarshal(b, &r), "the result: %s", b)
	assert.Equal(t, job.StateSucceeded, r.State, "%s %s", r.Reason, r.Error)
	assert.Equal(t, "dev", r.Tenant, "the token's tenant")
	assert.Equal(t, "hi\n", r.Stdout.Text, "stdout")
	t.Logf("gateway: job %s through POST /v1/jobs?wait=60s in %s", r.ID, took.Round(time.Millisecond))
}

func (c *compose) dumpLogs() {
	out, _ := c.compose(time.Minute, "ps")
	c.t.Logf("docker-compose ps:\n%s", out)
	out, _ = c.compose(time.Minute, "logs", "--no-color", "--tail", "40")
	c.t.Logf("docker-compose logs (last 40 lines per service):\n%s", tail(out, 20000))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
