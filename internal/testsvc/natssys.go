package testsvc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// SysCluster is a JetStream cluster of embedded NATS servers with two
// accounts, as an operator's fleet has them: APP (JetStream on; user app,
// password app) where the streams are, and the system account SYS (user
// sys, password sys), which answers the servers' $SYS.REQ.SERVER.PING
// requests (VARZ, JSZ).
type SysCluster struct {
	Name    string           // the cluster's name
	Servers []*server.Server // n-1, n-2, …: server i is named <Name>-<i+1>
	// URLs are the servers' client URLs, comma-separated; AppURL and SysURL
	// carry the two users' passwords.
	URLs, AppURL, SysURL string
}

// StartSysCluster starts n embedded servers on random loopback ports,
// routed to each other, and waits until JetStream has a meta leader. A
// cluster of one is a single server with the same accounts.
func StartSysCluster(tb testing.TB, n int) *SysCluster {
	tb.Helper()
	c := &SysCluster{Name: Unique("c")}
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range n {
		ports[i] = freePort(tb)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", freePort(tb))
	}
	urls := make([]string, n)
	for i := range n {
		s := c.start(tb, i, ports[i], routes)
		c.Servers = append(c.Servers, s)
		urls[i] = s.ClientURL()
		tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	}
	c.URLs = strings.Join(urls, ",")
	c.AppURL = withUser(urls, "app:app")
	c.SysURL = withUser(urls, "sys:sys")
	Eventually(tb, 30*time.Second, 20*time.Millisecond, func() bool {
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				return true
			}
		}
		return n == 1
	}, "the JetStream meta group of cluster %s elects a leader", c.Name)
	return c
}

func (c *SysCluster) start(tb testing.TB, i, port int, routes []string) *server.Server {
	tb.Helper()
	dir := tb.TempDir()
	cluster := ""
	if len(routes) > 1 {
		listen := strings.TrimPrefix(routes[i], "nats-route://")
		cluster = fmt.Sprintf("cluster { name: %q, listen: %q, routes: [%s] }", c.Name, listen, `"`+strings.Join(routes, `","`)+`"`)
	}
	conf := fmt.Sprintf(`server_name: "%s-%d"
listen: "127.0.0.1:%d"
jetstream { store_dir: %q }
accounts {
  APP: { jetstream: enabled, users: [{user: app, password: app}] }
  SYS: { users: [{user: sys, password: sys}] }
}
system_account: SYS
%s
`, c.Name, i+1, port, filepath.Join(dir, "js"), cluster)
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		tb.Fatalf("nats config: %v", err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		tb.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatalf("nats server %s not ready", s.Name())
	}
	return s
}

// withUser is urls with userinfo on each.
func withUser(urls []string, userinfo string) string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = strings.Replace(u, "nats://", "nats://"+userinfo+"@", 1)
	}
	return strings.Join(out, ",")
}
