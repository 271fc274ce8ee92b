// Package testsvc starts the real services Paddock's tests run against: a
// redis-server child on a private unix socket, an embedded NATS server with
// JetStream on a random loopback port, and the local Docker engine; for
// the fleet's failover tests, a Redis primary, replica and three Sentinels
// (StartRedisHA) and a JetStream cluster of embedded servers
// (StartNATSCluster), all on random loopback ports. Each
// helper isolates the test, registers t.Cleanup, and fails with a hint when
// the service is missing: the suite never skips silently. Eventually is the
// one poll-with-a-deadline the tests share, for what has no signal to wait on.
package testsvc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Redis is a private redis-server process.
type Redis struct {
	// Network and Addr as go-redis and asynq take them ("unix", socket path).
	Network, Addr string
	dir           string
	cmd           *exec.Cmd
	tb            testing.TB
}

// StartRedis starts a redis-server with AOF on (appendfsync always) in a
// temporary directory, listening only on a unix socket.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server not found: run `make test` (it installs it) or `apt-get install -y redis-server`")
	}
	dir, err := os.MkdirTemp("", "paddock-redis-")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Redis{Network: "unix", Addr: filepath.Join(dir, "redis.sock"), dir: dir, tb: tb}
	r.start()
	tb.Cleanup(func() { r.Stop(); os.RemoveAll(dir) })
	return r
}

func (r *Redis) start() {
	r.tb.Helper()
	r.cmd = exec.Command("redis-server", "--port", "0", "--unixsocket", r.Addr, "--unixsocketperm", "700",
		"--dir", r.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--maxmemory-policy", "noeviction", "--daemonize", "no", "--loglevel", "warning")
	r.cmd.Stdout, r.cmd.Stderr = nil, nil
	if err := r.cmd.Start(); err != nil {
		r.tb.Fatalf("start redis-server: %v", err)
	}
	c := r.Client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.tb.Fatalf("redis-server did not answer on %s: %v", r.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Options returns go-redis options for this server.
func (r *Redis) Options() *redis.Options {
	return &redis.Options{Network: r.Network, Addr: r.Addr}
}

// Client returns a new go-redis client; the caller closes it.
func (r *Redis) Client() *redis.Client { return redis.NewClient(r.Options()) }

// Stop kills the server (SIGKILL: a crash, not a clean shutdown).
func (r *Redis) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// Restart crashes the server and starts it again on the same socket with the
// same data directory (AOF replay).
func (r *Redis) Restart() {
	r.tb.Helper()
	r.Stop()
	_ = os.Remove(r.Addr)
	r.start()
}

// NATS is an embedded NATS server with JetStream.
type NATS struct {
	Server *server.Server
	URL    string
	opts   server.Options
	tb     testing.TB
}

// StartNATS starts an embedded NATS server with JetStream (file store in a
// temporary directory) on a random loopback port: the server binds port
// 0's pick itself, so no other test can take it between pick and bind.
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	n := &NATS{tb: tb, opts: server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: tb.TempDir(),
		NoLog: true, NoSigs: true,
	}}
	n.start()
	tb.Cleanup(n.Stop)
	return n
}

func (n *NATS) start() {
	n.tb.Helper()
	opts := n.opts
	s, err := server.NewServer(&opts)
	if err != nil {
		n.tb.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		n.tb.Fatalf("nats server not ready")
	}
	n.Server, n.URL = s, s.ClientURL()
	n.opts.Port = s.Addr().(*net.TCPAddr).Port // Restart comes back on it
}

// Stop shuts the server down.
func (n *NATS) Stop() {
	if n.Server != nil {
		n.Server.Shutdown()
		n.Server.WaitForShutdown()
		n.Server = nil
	}
}

// Restart stops the server and starts it again on the same port and store.
func (n *NATS) Restart() {
	n.tb.Helper()
	n.Stop()
	n.start()
}

func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Docker returns a client of the local engine, failing with a hint when the
// engine is unreachable.
func Docker(tb testing.TB) *client.Client {
	tb.Helper()
	c, err := client.New(client.FromEnv)
	if err != nil {
		tb.Fatalf("docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx, client.PingOptions{}); err != nil {
		tb.Fatalf("Docker engine unreachable (%v): run `make test` (it installs and starts dockerd) or start dockerd", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// TestImage is the tiny FROM-scratch image (busybox-static + bash-static)
// built by `make images`.
const TestImage = "paddock/test:latest"

// RequireImage fails unless image exists locally.
func RequireImage(tb testing.TB, c *client.Client, image string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ImageInspect(ctx, image); err != nil {
		tb.Fatalf("image %s missing (%v): run `make images` (make test does this)", image, err)
	}
}

// Unique returns a name unique to this test run, for labels, keys and streams.
func Unique(prefix string) string {
	return prefix + strconv.FormatInt(time.Now().UnixNano(), 36) + fmt.Sprint(os.Getpid()%1000)
}

// InitMain is a TestMain for packages that run sandboxes: it builds the
// static paddock-init once into a temporary directory, stores its path in
// *initPath, runs the tests, and checks for leaked goroutines.
func InitMain(m *testing.M, initPath *string) {
	dir, err := os.MkdirTemp("", "paddock-init-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*initPath = filepath.Join(dir, "paddock-init")
	build := exec.Command("go", "build", "-o", *initPath, "github.com/paddockhq/paddock/cmd/paddock-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build paddock-init: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// Idle keep-alive connections of the Docker client are not leaks.
		if err := goleak.Find(goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			// A server connection closed after an unread request body
			// lingers 500 ms before it ends (net/http's closeWriteAndWait).
			goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// AttackDir is where the adversarial tests mount the attack tool in a box.
const AttackDir = "/opt/attack"

// BuildAttack builds the static attack tool (sandbox/internal/attack) into a
// new directory, for a sandbox.Config's ExtraMounts at AttackDir, and
// returns the directory.
func BuildAttack(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "attack"), "github.com/paddockhq/paddock/sandbox/internal/attack")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build the attack tool: %v\n%s", err, out)
	}
	return dir
}
