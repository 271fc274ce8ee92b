package testsvc

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSCluster is a JetStream cluster of embedded NATS servers (the real
// server library) in this process, each with its own client port, route
// port (all on loopback, random) and file store.
type NATSCluster struct {
	Name    string
	Servers []*server.Server // nil where Shutdown stopped one; server i is named <Name>-<i+1>
	// AppURL and SysURL are every server's client URL with the user of the
	// APP or the SYS account (NATSClusterConfig.Accounts; empty without).
	AppURL, SysURL string
	opts           []*server.Options
	tb             testing.TB
}

// NATSClusterConfig: Accounts gives the servers an operator fleet's two
// accounts: APP (JetStream on; user app, password app), where the streams
// are, and the system account SYS (user sys, password sys), which answers
// the servers' $SYS.REQ.SERVER.PING requests (VARZ, JSZ). Without it the
// servers have no accounts and take any client.
type NATSClusterConfig struct {
	Accounts bool
}

// StartNATSCluster starts n servers (3 or 5 for a JetStream cluster) with
// full-mesh routes and waits until JetStream has a meta leader.
func StartNATSCluster(tb testing.TB, n int) *NATSCluster {
	return StartNATSClusterWith(tb, n, NATSClusterConfig{})
}

// StartNATSClusterWith is StartNATSCluster with cfg. A server that cannot
// listen (another process took a route port between its pick and the bind)
// gets the whole cluster started again on fresh ports, at most three times.
func StartNATSClusterWith(tb testing.TB, n int, cfg NATSClusterConfig) *NATSCluster {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		c, err := startCluster(tb, n, cfg)
		if err == nil {
			tb.Cleanup(func() {
				for i := range c.Servers {
					c.Shutdown(i)
				}
			})
			c.waitMeta()
			return c
		}
		if attempt == 3 {
			tb.Fatalf("NATS cluster: %v", err)
		}
		tb.Logf("NATS cluster: %v: starting it again on fresh ports", err)
	}
}

// startCluster starts n servers at once, each on a random client port
// (kept for Restart) and a picked route port (every server's routes must
// name them before any starts), and stops them all when one is not ready.
func startCluster(tb testing.TB, n int, cfg NATSClusterConfig) (*NATSCluster, error) {
	c := &NATSCluster{Name: Unique("c"), Servers: make([]*server.Server, n), tb: tb}
	ports := make([]int, n)
	var routes []*url.URL
	for i := range ports {
		ports[i] = freePort(tb)
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	for i := range n {
		o := &server.Options{}
		if cfg.Accounts {
			o = accountOptions(tb)
		}
		o.ServerName, o.Host, o.Port = fmt.Sprintf("%s-%d", c.Name, i+1), "127.0.0.1", server.RANDOM_PORT
		o.JetStream, o.StoreDir, o.NoLog, o.NoSigs = true, tb.TempDir(), true, true
		o.Cluster = server.ClusterOpts{Name: c.Name, Host: "127.0.0.1", Port: ports[i]}
		o.Routes = routes
		c.opts = append(c.opts, o)
	}
	errs := make([]*errorLog, n)
	for i := range n {
		s, err := server.NewServer(c.opts[i])
		if err != nil {
			tb.Fatalf("nats server %d: %v", i, err)
		}
		errs[i] = &errorLog{}
		s.SetLogger(errs[i], false, false)
		c.Servers[i] = s
		go s.Start()
	}
	for i, s := range c.Servers {
		if !s.ReadyForConnections(30 * time.Second) {
			for j := range c.Servers {
				c.Shutdown(j)
			}
			return nil, fmt.Errorf("server %s not ready in 30 s: %s", c.opts[i].ServerName, errs[i])
		}
		c.opts[i].Port = s.Addr().(*net.TCPAddr).Port
	}
	if cfg.Accounts {
		c.AppURL, c.SysURL = c.urlWith("app:app@"), c.urlWith("sys:sys@")
	}
	return c, nil
}

// errorLog keeps a server's errors (its other lines are dropped), for the
// message of a server that did not start.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, fmt.Sprintf(format, v...))
}

func (l *errorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.msgs) == 0 {
		return "it logged no error"
	}
	return strings.Join(l.msgs, "; ")
}

func (l *errorLog) Fatalf(format string, v ...any) { l.add(format, v...) }
func (l *errorLog) Errorf(format string, v ...any) { l.add(format, v...) }
func (*errorLog) Noticef(string, ...any)           {}
func (*errorLog) Warnf(string, ...any)             {}
func (*errorLog) Debugf(string, ...any)            {}
func (*errorLog) Tracef(string, ...any)            {}

// accountOptions are the options of NATSClusterConfig.Accounts, read from
// a config file (accounts with JetStream limits have no other public way
// in).
func accountOptions(tb testing.TB) *server.Options {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "accounts.conf")
	conf := `accounts {
  APP: { jetstream: enabled, users: [{user: app, password: app}] }
  SYS: { users: [{user: sys, password: sys}] }
}
system_account: SYS
`
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		tb.Fatalf("nats accounts config: %v", err)
	}
	return o
}

func (c *NATSCluster) start(i int) {
	c.tb.Helper()
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		c.tb.Fatalf("nats server %d: %v", i, err)
	}
	errs := &errorLog{}
	s.SetLogger(errs, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		c.tb.Fatalf("nats server %s not ready in 30 s: %s", c.opts[i].ServerName, errs)
	}
	c.Servers[i] = s
}

// URL is the comma-separated client URL list of every server.
func (c *NATSCluster) URL() string { return c.urlWith("") }

// urlWith is URL with userinfo ("user:password@") in each URL.
func (c *NATSCluster) urlWith(userinfo string) string {
	urls := make([]string, len(c.opts))
	for i, o := range c.opts {
		urls[i] = fmt.Sprintf("nats://%s127.0.0.1:%d", userinfo, o.Port)
	}
	return strings.Join(urls, ",")
}

// ServerName is server i's name (what StreamInfo's cluster info names).
func (c *NATSCluster) ServerName(i int) string { return c.opts[i].ServerName }

// Index is the index of the server named name, -1 if none.
func (c *NATSCluster) Index(name string) int {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	return -1
}

// Shutdown stops server i (its store stays, for Restart).
func (c *NATSCluster) Shutdown(i int) {
	if s := c.Servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Servers[i] = nil
	}
}

// Restart starts a stopped server i again on its ports and store.
func (c *NATSCluster) Restart(i int) { c.start(i) }

// waitMeta waits until a client can use JetStream (the meta group has a
// leader that knows every server as a peer, and every server is routed).
func (c *NATSCluster) waitMeta() {
	c.tb.Helper()
	nc, err := nats.Connect(cmp.Or(c.AppURL, c.URL()), nats.MaxReconnects(-1))
	if err != nil {
		c.tb.Fatalf("connect to the cluster: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		c.tb.Fatal(err)
	}
	Eventually(c.tb, 30*time.Second, 100*time.Millisecond, func() bool {
		for _, s := range c.Servers {
			if s.NumRoutes() < len(c.Servers)-1 {
				return false
			}
		}
		// The meta leader must know every server as an online JetStream
		// peer with stats, or an R3 create right after this answers "no
		// suitable peers for placement".
		peers := 0
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				peers = len(s.JetStreamClusterPeers())
			}
		}
		if peers < len(c.Servers) {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	}, "NATS cluster %s: JetStream meta leader elected, every server its peer", c.Name)
}
