package testsvc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// LoopbackRedis is a redis-server on a loopback TCP port (replication
// and Sentinel need TCP; StartRedis listens on a unix socket).
type LoopbackRedis struct {
	Addr string // 127.0.0.1:port
	Port string
	cmd  *exec.Cmd
}

// StartLoopbackRedis starts redis-server on a free loopback port, no
// persistence, with extra arguments (e.g. "--replicaof", host, port); it
// is killed at cleanup.
func StartLoopbackRedis(tb testing.TB, extra ...string) *LoopbackRedis {
	tb.Helper()
	port := fmt.Sprint(freePort(tb))
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", tb.TempDir(), "--daemonize", "no", "--loglevel", "warning"}, extra...)
	r := &LoopbackRedis{Addr: "127.0.0.1:" + port, Port: port}
	r.run(tb, exec.Command("redis-server", args...))
	return r
}

// StartSentinelFor starts a redis-server --sentinel on a free loopback
// port that monitors master (host:port) under name, quorum 1.
func StartSentinelFor(tb testing.TB, master, name string) *LoopbackRedis {
	tb.Helper()
	port := fmt.Sprint(freePort(tb))
	host, mport, _ := strings.Cut(master, ":")
	conf := filepath.Join(tb.TempDir(), "sentinel.conf")
	text := fmt.Sprintf("port %s\nbind 127.0.0.1\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n", port, name, host, mport, name)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	r := &LoopbackRedis{Addr: "127.0.0.1:" + port, Port: port}
	r.run(tb, exec.Command("redis-server", conf, "--sentinel", "--daemonize", "no", "--loglevel", "warning"))
	return r
}

func (r *LoopbackRedis) run(tb testing.TB, cmd *exec.Cmd) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server not found: run `make test` (it installs it) or `apt-get install -y redis-server`")
	}
	r.cmd = cmd
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %v: %v", cmd.Args, err)
	}
	tb.Cleanup(r.Kill)
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	Eventually(tb, 10*time.Second, 10*time.Millisecond, func() bool { return c.Ping(context.Background()).Err() == nil },
		"%v answers on %s", cmd.Args[:2], r.Addr)
}

// Kill kills the server (SIGKILL). Idempotent.
func (r *LoopbackRedis) Kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}
