package testsvc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisHA is a Redis primary, one replica and three Sentinels (quorum 2)
// on random loopback ports, each a redis-server child with its own
// directory. With auth on, the data nodes allow only one ACL user with
// every permission (Paddock's layout: internal/devstack), which the
// replica and the Sentinels use too. With SentinelAuth the Sentinels also
// require a password of their own (requirepass, and sentinel-pass among
// themselves), which the URL carries as sentinel_password. Failover is
// tuned for tests: a node is down after 1 s without an answer, so Sentinel
// promotes the replica 2-5 s after the primary dies.
type RedisHA struct {
	Master           string // the master name the Sentinels monitor
	User, Password   string // empty without auth
	SentinelPassword string // the Sentinels' own; empty without SentinelAuth
	Nodes            []*RedisNode
	Sentinels        []*RedisNode
	tb               testing.TB
}

// RedisNode is one redis-server process (a data node or a Sentinel).
type RedisNode struct {
	Port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// Addr is the node's host:port.
func (n *RedisNode) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) }

// RedisHAConfig: Auth turns Paddock's ACL user on; SentinelAuth makes the
// Sentinels require a password of their own.
type RedisHAConfig struct {
	Auth, SentinelAuth bool
}

// StartRedisHA starts the set and waits until every Sentinel knows the
// master and the replica is in sync.
func StartRedisHA(tb testing.TB, cfg RedisHAConfig) *RedisHA {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server not found: run `make test` (it installs it) or `apt-get install -y redis-server`")
	}
	h := &RedisHA{Master: Unique("m"), tb: tb}
	if cfg.Auth {
		h.User, h.Password = "paddock", secret()
	}
	if cfg.SentinelAuth {
		h.SentinelPassword = secret()
	}
	primary := h.node(nil)
	replica := h.node([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)})
	h.Nodes = []*RedisNode{primary, replica}
	for _, n := range h.Nodes {
		n.start(tb)
	}
	for range 3 {
		s := h.sentinel(primary.Port)
		s.start(tb)
		h.Sentinels = append(h.Sentinels, s)
	}
	tb.Cleanup(func() {
		for _, n := range append(append([]*RedisNode{}, h.Sentinels...), h.Nodes...) {
			n.Kill()
			os.RemoveAll(n.dir)
		}
	})
	h.waitReady(primary.Addr())
	return h
}

// node makes (does not start) a data node; extra are more arguments.
func (h *RedisHA) node(extra []string) *RedisNode {
	n := &RedisNode{Port: freePort(h.tb), dir: h.tempDir("paddock-redis-ha-")}
	n.args = []string{"--port", strconv.Itoa(n.Port), "--bind", "127.0.0.1", "--dir", n.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory-policy", "noeviction",
		"--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(n.dir, "redis.log"),
		// A replica takes over with its data; a restarted old primary
		// resyncs from the new one.
		"--replica-serve-stale-data", "yes", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	if h.Password != "" {
		acl := filepath.Join(n.dir, "users.acl")
		text := "user default off\nuser " + h.User + " on >" + h.Password + " ~* &* +@all\n"
		if err := os.WriteFile(acl, []byte(text), 0o600); err != nil {
			h.tb.Fatal(err)
		}
		n.args = append(n.args, "--aclfile", acl, "--masteruser", h.User, "--masterauth", h.Password)
	}
	n.args = append(n.args, extra...)
	return n
}

// sentinel makes (does not start) a Sentinel of the primary at port.
func (h *RedisHA) sentinel(primary int) *RedisNode {
	s := &RedisNode{Port: freePort(h.tb), dir: h.tempDir("paddock-sentinel-")}
	conf := []string{
		"port " + strconv.Itoa(s.Port), "bind 127.0.0.1", "dir " + s.dir,
		"logfile " + filepath.Join(s.dir, "sentinel.log"), "loglevel notice",
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", h.Master, primary),
		"sentinel down-after-milliseconds " + h.Master + " 1000",
		"sentinel failover-timeout " + h.Master + " 5000",
		"sentinel parallel-syncs " + h.Master + " 1",
	}
	if h.Password != "" {
		conf = append(conf, "sentinel auth-user "+h.Master+" "+h.User, "sentinel auth-pass "+h.Master+" "+h.Password)
	}
	if h.SentinelPassword != "" {
		conf = append(conf, "requirepass "+h.SentinelPassword, "sentinel sentinel-pass "+h.SentinelPassword)
	}
	path := filepath.Join(s.dir, "sentinel.conf") // Sentinel rewrites it
	if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		h.tb.Fatal(err)
	}
	s.args = []string{path, "--sentinel"}
	return s
}

func (h *RedisHA) tempDir(prefix string) string {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		h.tb.Fatal(err)
	}
	return dir
}

func (n *RedisNode) start(tb testing.TB) {
	tb.Helper()
	n.cmd = exec.Command("redis-server", n.args...)
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test binary
	if err := n.cmd.Start(); err != nil {
		tb.Fatalf("start redis-server %v: %v", n.args, err)
	}
}

// Kill SIGKILLs the node (a crash) and waits for it to exit.
func (n *RedisNode) Kill() {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
		n.cmd = nil
	}
}

// Signal sends sig (SIGSTOP, SIGCONT) to the node.
func (n *RedisNode) Signal(sig syscall.Signal) {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(sig)
	}
}

// Restart starts a killed node again with its data directory. Sentinel
// turns a restarted old primary into a replica of the new one.
func (h *RedisHA) Restart(n *RedisNode) { n.start(h.tb) }

// URL is the set's Paddock --redis-url (redis+sentinel://…).
func (h *RedisHA) URL() string {
	addrs := make([]string, len(h.Sentinels))
	for i, s := range h.Sentinels {
		addrs[i] = s.Addr()
	}
	auth := ""
	if h.Password != "" {
		auth = h.User + ":" + h.Password + "@"
	}
	u := "redis+sentinel://" + auth + strings.Join(addrs, ",") + "/" + h.Master
	if h.SentinelPassword != "" {
		u += "?sentinel_password=" + h.SentinelPassword
	}
	return u
}

// secret is a random password: 32 hex digits.
func secret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sentinelClient is a client of Sentinel s; the caller closes it.
func (h *RedisHA) sentinelClient(s *RedisNode) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), Password: h.SentinelPassword, DialTimeout: time.Second, MaxRetries: -1})
}

// NodeClient is a plain client of data node n; the caller closes it.
func (h *RedisHA) NodeClient(n *RedisNode) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.Addr(), Username: h.User, Password: h.Password,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
}

// MasterAddr is the master's address as the first Sentinel that answers
// gives it.
func (h *RedisHA) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, s := range h.Sentinels {
		if s.cmd == nil {
			continue
		}
		a, err := h.askMaster(ctx, s)
		if err == nil {
			return a, nil
		}
		last = err
	}
	return "", fmt.Errorf("no Sentinel gives master %s: %v", h.Master, last)
}

// Primary is the data node the Sentinels name master.
func (h *RedisHA) Primary(ctx context.Context) *RedisNode {
	h.tb.Helper()
	addr, err := h.MasterAddr(ctx)
	if err != nil {
		h.tb.Fatal(err)
	}
	for _, n := range h.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	h.tb.Fatalf("the Sentinels name %s master, no node of the set", addr)
	return nil
}

// WaitMaster waits until every live Sentinel names the same master other
// than not, and that node answers as master; it returns its address. All
// Sentinels must agree: one that lags behind the failover still names the
// old primary, and would hand it back to clients once it restarts.
func (h *RedisHA) WaitMaster(not string, within time.Duration) string {
	h.tb.Helper()
	var addr string
	Eventually(h.tb, within, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		a, ok := h.agreedMaster(ctx)
		if !ok || a == not {
			return false
		}
		addr = a
		return h.role(ctx, a) == "master"
	}, "a Sentinel failover of %s away from %s (see the logs under %s)", h.Master, not, h.Sentinels[0].dir)
	return addr
}

// WaitConverged waits until the set is whole again: every live Sentinel
// names one master, that node answers as master, and every other live
// data node replicates from it with its link up. It returns the master's
// address. It does not insist on which node is master: on a loaded
// machine the Sentinels may fail over more than once, and what matters
// is that they end on one master with every node behind it.
func (h *RedisHA) WaitConverged(within time.Duration) string {
	h.tb.Helper()
	var addr string
	Eventually(h.tb, within, 200*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		a, ok := h.agreedMaster(ctx)
		if !ok || h.role(ctx, a) != "master" {
			return false
		}
		addr = a
		for _, n := range h.Nodes {
			if n.cmd == nil || n.Addr() == a {
				continue
			}
			if !h.replicatesFrom(ctx, n, a) {
				return false
			}
		}
		return true
	}, "Redis Sentinel set %s whole again (see the logs under %s)", h.Master, h.Sentinels[0].dir)
	return addr
}

// askMaster is the master's address as Sentinel s gives it.
func (h *RedisHA) askMaster(ctx context.Context, s *RedisNode) (string, error) {
	sc := h.sentinelClient(s)
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(ctx, h.Master).Result()
	if err == nil && len(hp) != 2 {
		err = fmt.Errorf("sentinel %s: master %s is %v", s.Addr(), h.Master, hp)
	}
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// agreedMaster is the master every live Sentinel names, and whether they
// all answered and agreed.
func (h *RedisHA) agreedMaster(ctx context.Context) (string, bool) {
	agreed := ""
	for _, s := range h.Sentinels {
		if s.cmd == nil {
			continue
		}
		a, err := h.askMaster(ctx, s)
		if err != nil {
			return "", false
		}
		if agreed != "" && a != agreed {
			return "", false
		}
		agreed = a
	}
	return agreed, agreed != ""
}

// replicatesFrom reports whether data node n is a replica of master with
// its link up.
func (h *RedisHA) replicatesFrom(ctx context.Context, n *RedisNode, master string) bool {
	c := h.NodeClient(n)
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return false
	}
	host, port, _ := net.SplitHostPort(master)
	return strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") &&
		strings.Contains(info, "master_host:"+host+"\r\n") && strings.Contains(info, "master_port:"+port+"\r\n")
}

// role is INFO replication's role of the node at addr ("" on an error).
func (h *RedisHA) role(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, Username: h.User, Password: h.Password, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "role:"); ok {
			return v
		}
	}
	return ""
}

// waitReady waits until every Sentinel names primary and sees the
// replica, and the replica's link is up.
func (h *RedisHA) waitReady(primary string) {
	h.tb.Helper()
	Eventually(h.tb, 30*time.Second, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, s := range h.Sentinels {
			sc := h.sentinelClient(s)
			hp, err := sc.GetMasterAddrByName(ctx, h.Master).Result()
			reps, rerr := sc.Replicas(ctx, h.Master).Result()
			sc.Close()
			if err != nil || len(hp) != 2 || net.JoinHostPort(hp[0], hp[1]) != primary || rerr != nil || len(reps) == 0 {
				return false
			}
		}
		c := h.NodeClient(h.Nodes[1])
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, "Redis Sentinel set %s ready (see the logs under %s)", h.Master, h.Sentinels[0].dir)
}
