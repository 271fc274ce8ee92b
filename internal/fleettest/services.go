package fleettest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ports inside each host (every host has its own address, so they never
// collide with anything else on the machine).
const (
	natsPort     = 4222
	routePort    = 6222
	monitorPort  = 8222
	redisPort    = 6379
	sentinelPort = 26379
	masterName   = "mymaster"
)

// bins are the binaries the fleet runs.
type bins struct{ paddock, init, nats string }

// buildBins builds paddock, paddock-init and nats-server (from the module
// cache: the version go.mod pins) into dir.
func buildBins(dir string) (bins, error) {
	b := bins{paddock: filepath.Join(dir, "paddock"), init: filepath.Join(dir, "paddock-init"), nats: filepath.Join(dir, "nats-server")}
	for out, pkg := range map[string]string{
		b.paddock: "github.com/paddockhq/paddock/cmd/paddock",
		b.init:    "github.com/paddockhq/paddock/cmd/paddock-init",
		b.nats:    "github.com/nats-io/nats-server/v2",
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %v\n%s", pkg, err, o)
		}
	}
	return b, nil
}

// natsConf is node i's (1-based) configuration: JetStream in its own
// store (fsync on every write, as the compose fleet runs), routes to the
// other nodes.
func (f *fleet) natsConf(i int) string {
	var routes []string
	for j := 1; j <= 3; j++ {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats://%s:%d", f.ip["n"+strconv.Itoa(j)], routePort))
		}
	}
	ip := f.ip["n"+strconv.Itoa(i)]
	return fmt.Sprintf(`server_name: n%d
listen: "%s:%d"
http: "%s:%d"
max_payload: 8MB
jetstream {
  store_dir: %q
  sync_interval: always
  max_file_store: 32GB
  max_memory_store: 256MB
}
cluster {
  name: pdk
  listen: "%s:%d"
  routes: [%s]
}
`, i, ip, natsPort, ip, monitorPort, filepath.Join(f.dir, fmt.Sprintf("n%d-js", i)), ip, routePort, strings.Join(routes, ", "))
}

// startNATS writes the three nodes' configurations and starts them.
func (f *fleet) startNATS() error {
	for i := 1; i <= 3; i++ {
		conf := filepath.Join(f.dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(conf, []byte(f.natsConf(i)), 0o600); err != nil {
			return err
		}
		name := "n" + strconv.Itoa(i)
		p := newProc(f.dir, name, f.net.ns(name), f.bins.nats, "-c", conf)
		f.procs[name] = p
		if err := p.start(); err != nil {
			return err
		}
	}
	return nil
}

// natsURLs is the fleet's NATS URL list.
func (f *fleet) natsURLs() string {
	var us []string
	for i := 1; i <= 3; i++ {
		us = append(us, fmt.Sprintf("nats://%s:%d", f.ip["n"+strconv.Itoa(i)], natsPort))
	}
	return strings.Join(us, ",")
}

// redisArgs are a Redis server's flags on host (AOF everysec, no
// eviction, no password: the harness runs auth-off, docs/reliability.md).
func (f *fleet) redisArgs(host string) []string {
	dir := filepath.Join(f.dir, host+"-redis")
	_ = os.MkdirAll(dir, 0o700)
	return []string{"redis-server", "--bind", f.ip[host], "--port", strconv.Itoa(redisPort), "--protected-mode", "no",
		"--dir", dir, "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
		"--maxmemory-policy", "noeviction", "--replica-announce-ip", f.ip[host]}
}

// startRedis starts the primary on r1, its replica on r2 and a Sentinel on
// each of r1, r2, r3 (quorum 2).
func (f *fleet) startRedis() error {
	f.procs["redis1"] = newProc(f.dir, "redis1", f.net.ns("r1"), f.redisArgs("r1")...)
	f.procs["redis2"] = newProc(f.dir, "redis2", f.net.ns("r2"), append(f.redisArgs("r2"),
		"--replicaof", f.ip["r1"], strconv.Itoa(redisPort))...)
	for i := 1; i <= 3; i++ {
		host := "r" + strconv.Itoa(i)
		conf := filepath.Join(f.dir, "sentinel"+strconv.Itoa(i)+".conf")
		// Sentinel rewrites its file: one each, writable.
		text := fmt.Sprintf("port %d\nbind %s\nprotected-mode no\ndir %s\nsentinel announce-ip %s\n"+
			"sentinel monitor %s %s %d 2\nsentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			sentinelPort, f.ip[host], f.dir, f.ip[host], masterName, f.ip["r1"], redisPort,
			masterName, f.sentinelDownAfter(), masterName, masterName)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return err
		}
		name := "sentinel" + strconv.Itoa(i)
		f.procs[name] = newProc(f.dir, name, f.net.ns(host), "redis-server", conf, "--sentinel")
	}
	for _, name := range []string{"redis1", "redis2", "sentinel1", "sentinel2", "sentinel3"} {
		if err := f.procs[name].start(); err != nil {
			return err
		}
	}
	return nil
}

// sentinelDownAfter is how long the Sentinels wait before they declare
// the primary down. Without the Sentinel URL the fleet cannot follow a
// failover, so the Sentinels then only watch (a minute: a restart of the
// primary is over long before).
func (f *fleet) sentinelDownAfter() int {
	if f.mode.sentinel {
		return 2000
	}
	return 60000
}

// sentinelAddrs are the Sentinels' host:port.
func (f *fleet) sentinelAddrs() []string {
	var out []string
	for i := 1; i <= 3; i++ {
		out = append(out, fmt.Sprintf("%s:%d", f.ip["r"+strconv.Itoa(i)], sentinelPort))
	}
	return out
}

// redisURL is the --redis-url every paddock process gets: the Sentinel
// URL when the binary takes one (issue 27's h27-ha), else the primary's.
func (f *fleet) redisURL() string {
	if f.mode.sentinel {
		return "redis+sentinel://" + strings.Join(f.sentinelAddrs(), ",") + "/" + masterName
	}
	return fmt.Sprintf("redis://%s:%d", f.ip["r1"], redisPort)
}

// primary asks the Sentinels which host holds the primary now.
func (f *fleet) primary(ctx context.Context) (string, error) {
	var last error
	for _, a := range f.sentinelAddrs() {
		s := redis.NewSentinelClient(&redis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: time.Second})
		addr, err := s.GetMasterAddrByName(ctx, masterName).Result()
		s.Close()
		if err == nil && len(addr) == 2 {
			for h, ip := range f.ip {
				if ip == addr[0] && strings.HasPrefix(h, "r") {
					return h, nil
				}
			}
		}
		last = err
	}
	return "", fmt.Errorf("no Sentinel names the primary: %v", last)
}

// common are the flags of every paddock process.
func (f *fleet) common() []string {
	args := []string{"--nats-url", f.natsURLs(), "--redis-url", f.redisURL(), "--log-level", "info", "--images", testImage}
	if f.mode.replicas > 1 {
		args = append(args, "--replicas", strconv.Itoa(f.mode.replicas))
	}
	return args
}

// startPaddock creates the scheduler and worker processes and starts them.
func (f *fleet) startPaddock() error {
	for _, s := range schedulerHosts {
		f.procs[s] = newProc(f.dir, s, f.net.ns(s), append(append([]string{f.bins.paddock, "scheduler"}, f.common()...),
			"--max-retry", "3")...)
	}
	for _, w := range workerHosts {
		args := append(append([]string{f.bins.paddock, "worker"}, f.common()...),
			"--worker-id", f.workerID(w), "--init-path", f.bins.init, "--concurrency", strconv.Itoa(workerConcurrency),
			"--pool-size", "1", "--skip-self-test", "--shutdown-timeout", "15s")
		f.procs[w] = newProc(f.dir, w, f.net.ns(w), args...)
	}
	for _, name := range append(append([]string{}, schedulerHosts...), workerHosts...) {
		f.procs[name].supervised = true
		if err := f.procs[name].start(); err != nil {
			return err
		}
	}
	return nil
}

// workerID is the worker id (and box owner label) of worker host w.
func (f *fleet) workerID(w string) string { return prefix + f.net.run + "-" + w }
