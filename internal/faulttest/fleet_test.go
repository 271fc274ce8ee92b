package faulttest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/hibiken/asynq"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
)

// bins are the binaries under test, built once by TestMain.
var bins struct{ paddock, init string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "paddock-faulttest-")
	if err != nil {
		panic(err)
	}
	bins.paddock, bins.init = filepath.Join(dir, "paddock"), filepath.Join(dir, "paddock-init")
	for out, pkg := range map[string]string{bins.paddock: "./cmd/paddock", bins.init: "./cmd/paddock-init"} {
		build := exec.Command("go", "build", "-o", out, "github.com/paddockhq/paddock/"+strings.TrimPrefix(pkg, "./"))
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, b)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fleet is one isolated Paddock deployment: its own redis-server and NATS
// server, and any number of scheduler and worker processes on the shared
// Docker engine. Everything is torn down by t.Cleanup, processes first.
type fleet struct {
	t      *testing.T
	name   string
	dir    string
	redis  *testsvc.Redis
	nats   *testsvc.NATS
	docker *client.Client
	rdb    *redis.Client
	nc     *nats.Conn
	client *pclient.Client
	store  *results.Store
	insp   *asynq.Inspector
	// redisURL and natsURL are what the processes get (common).
	redisURL, natsURL string

	mu     sync.Mutex
	procs  []*proc
	owners []string
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	d := testsvc.Docker(t)
	testsvc.RequireImage(t, d, testsvc.TestImage)
	ns := testsvc.StartNATS(t)
	rs := testsvc.StartRedis(t)
	nc, err := nats.Connect(ns.URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	c, err := pclient.New(nc, pclient.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	f := &fleet{
		t: t, name: testsvc.Unique("f"), dir: t.TempDir(), redis: rs, nats: ns, docker: d, rdb: rdb, nc: nc,
		client: c, store: results.NewStore(rdb, js, results.StoreConfig{}), insp: asynq.NewInspectorFromRedisClient(rdb),
		redisURL: "unix://" + rs.Addr, natsURL: ns.URL,
	}
	t.Cleanup(f.teardown) // runs before the services' cleanups
	return f
}

// proc is one paddock child process.
type proc struct {
	name, id string // id: the worker id (workers only)
	cmd      *exec.Cmd
	log      string
	done     chan struct{}
	err      error // of Wait, valid once done is closed
}

func (f *fleet) common() []string {
	return []string{"--nats-url", f.natsURL, "--redis-url", f.redisURL, "--log-level", "info",
		"--images", testsvc.TestImage}
}

// start runs bin/paddock args in its own log file.
func (f *fleet) start(name string, args ...string) *proc {
	f.t.Helper()
	logPath := filepath.Join(f.dir, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(f.t, err)
	defer lf.Close()
	cmd := exec.Command(bins.paddock, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = childEnv()
	// A child never outlives the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(f.t, cmd.Start(), "start %s", name)
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

// childEnv is this process's environment without Paddock and OTel settings.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PADDOCK_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// scheduler starts a `paddock scheduler` and waits until it consumes.
// Processes start one at a time: the embedded nats-server (in this test
// binary, under -race) has a data race between a stream update (every
// process applies its stream settings at start) and a concurrent consumer
// creation (nats-server v2.15.2, filestore.go UpdateConfig/ConsumerStore).
func (f *fleet) scheduler(name string, extra ...string) *proc {
	f.t.Helper()
	p := f.start(name, append(append([]string{"scheduler"}, f.common()...), extra...)...)
	f.waitFor(30*time.Second, name+" ready", func() bool {
		if p.exited() {
			f.t.Fatalf("%s exited before it was ready: %v\n%s", name, p.err, p.tail(30))
		}
		b, _ := os.ReadFile(p.log)
		return strings.Contains(string(b), `msg="scheduler running"`)
	})
	return p
}

// worker starts a `paddock worker` (concurrency 2, one warm container, no
// self-test unless extra says otherwise) and waits for its heartbeat.
func (f *fleet) worker(name string, extra ...string) *proc {
	f.t.Helper()
	id := f.name + "-" + name
	f.mu.Lock()
	f.owners = append(f.owners, id)
	f.mu.Unlock()
	args := append([]string{"worker"}, f.common()...)
	args = append(args, "--worker-id", id, "--init-path", bins.init, "--concurrency", "2", "--pool-size", "1",
		"--skip-self-test", "--shutdown-timeout", "10s")
	p := f.start(name, append(args, extra...)...)
	p.id = id
	f.waitFor(30*time.Second, name+" heartbeat", func() bool {
		if p.exited() {
			f.t.Fatalf("%s exited before it was ready: %v\n%s", name, p.err, p.tail(30))
		}
		n, err := f.rdb.Exists(context.Background(), "paddock:worker:"+id).Result()
		return err == nil && n == 1
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// wait waits up to timeout for the process to end and returns its exit
// code (-1 when killed by a signal); ok is false on timeout.
func (p *proc) wait(timeout time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	fh, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer fh.Close()
	var lines []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func (f *fleet) teardown() {
	f.mu.Lock()
	procs, owners := f.procs, f.owners
	f.mu.Unlock()
	for _, p := range procs {
		p.signal(syscall.SIGKILL)
		<-p.done
	}
	if f.t.Failed() {
		for _, p := range procs {
			f.t.Logf("---- %s (%v) last lines:\n%s", p.name, p.err, p.tail(25))
		}
	}
	f.removeOwned(owners)
}

// removeOwned removes the containers of owners, and looks again a second
// later until a look finds none (at most 20 s). A worker killed with
// SIGKILL may have sent a create that the engine completes after the
// first look; that box would stay in state Created with no worker left to
// reap it (make test's leftovers check fails on it).
func (f *fleet) removeOwned(owners []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f.removeAll(ctx, owners)
	for {
		select {
		case <-ctx.Done():
			f.t.Errorf("containers of %v still appear after 20 s of removing them", owners)
			return
		case <-time.After(time.Second): // the settle window: an engine's in-flight create has no event to wait on
		}
		if f.removeAll(ctx, owners) == 0 {
			return
		}
	}
}

// removeAll force-removes the containers of owners and returns how many it
// found.
func (f *fleet) removeAll(ctx context.Context, owners []string) int {
	found := 0
	for _, o := range owners {
		for _, c := range f.containers(o) {
			found++
			if _, err := f.docker.ContainerRemove(ctx, c, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) { // gone, or the engine (AutoRemove) is removing it
				f.t.Errorf("remove container %s of %s: %v", c, o, err)
			}
		}
	}
	return found
}

// containers lists the ids of the containers of owner, running or not. An
// engine that cannot answer fails the test: an empty list would pass the
// leak checks without checking anything.
func (f *fleet) containers(owner string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := f.docker.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", sandbox.LabelOwner+"="+owner)})
	if err != nil {
		f.t.Errorf("list containers of %s: %v (the leak check cannot see the engine)", owner, err)
		return nil
	}
	ids := make([]string, 0, len(list.Items))
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// boxRunning reports whether owner's container id still runs; removed or
// exited, it does not.
func (f *fleet) boxRunning(owner, id string) bool {
	for _, c := range f.containerStates(owner) {
		if c.ID == id {
			return c.State == container.StateRunning
		}
	}
	return false
}

// containerStates lists the containers of owner, running or not, with
// their state; an engine that cannot answer fails the test.
func (f *fleet) containerStates(owner string) []container.Summary {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := f.docker.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", sandbox.LabelOwner+"="+owner)})
	require.NoError(f.t, err, "list containers of %s (the leak check cannot see the engine)", owner)
	return list.Items
}

// waitWarm waits until each worker's warm pool is full: at least pool
// containers, all running (the boxes of the jobs that ended are removed;
// a profile other than the jobs' default, or a pool grown by demand,
// keeps more). Measurements start from there.
func (f *fleet) waitWarm(pool int, owners ...string) {
	f.t.Helper()
	for _, owner := range owners {
		f.waitFor(time.Minute, owner+"'s full warm pool", func() bool {
			list := f.containerStates(owner)
			for _, c := range list {
				if c.State != container.StateRunning {
					return false
				}
			}
			return len(list) >= pool
		})
	}
}

// waitFor polls cond every 50 ms until it holds, failing the test after
// timeout (a liveness deadline, not a performance assertion).
func (f *fleet) waitFor(timeout time.Duration, what string, cond func() bool) {
	f.t.Helper()
	testsvc.Eventually(f.t, timeout, 50*time.Millisecond, cond, "waiting for %s", what)
}

// submit submits spec and returns its id; the submission is acked.
func (f *fleet) submit(spec job.Spec) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := f.client.Submit(ctx, spec)
	require.NoError(f.t, err)
	return sub.ID
}

// result waits up to timeout for id's result.
func (f *fleet) result(id string, timeout time.Duration) job.Result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := f.client.Wait(ctx, id)
	require.NoError(f.t, err, "no result for %s within %s", id, timeout)
	return r
}

// runs is the job's run counter (results.Store.BeginRun): how many times a
// worker started it.
func (f *fleet) runs(id string) int {
	v, err := f.rdb.Get(context.Background(), "paddock:runs:"+job.Key("", id)).Result()
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(v)
	return n
}

// waitRunning waits until a container of owner runs a process whose
// command line holds marker (put the job id in its command), and returns
// the container id.
func (f *fleet) waitRunning(owner, marker string, timeout time.Duration) string {
	f.t.Helper()
	var found string
	f.waitFor(timeout, "a container of "+owner+" running "+marker, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := f.docker.ContainerList(ctx, client.ContainerListOptions{
			Filters: make(client.Filters).Add("label", sandbox.LabelOwner+"="+owner)})
		if err != nil {
			return false
		}
		for _, c := range list.Items {
			top, err := f.docker.ContainerTop(ctx, c.ID, client.ContainerTopOptions{})
			if err != nil {
				continue
			}
			for _, p := range top.Processes {
				if strings.Contains(strings.Join(p, " "), marker) {
					found = c.ID
					return true
				}
			}
		}
		return false
	})
	return found
}

// taskState returns the state of id's asynq task in the default queue.
func (f *fleet) taskState(id string) (asynq.TaskState, int, error) {
	info, err := f.insp.GetTaskInfo(job.DefaultQueue, job.Key("", id))
	if err != nil {
		return 0, 0, err
	}
	return info.State, info.Retried, nil
}
