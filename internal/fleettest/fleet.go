package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/results"
)

const testImage = "paddock/test:latest"

// httpClient asks the NATS nodes' monitoring ports.
var httpClient = &http.Client{Timeout: time.Second}

// The fleet's hosts and their last address octet.
var (
	natsHosts      = []string{"n1", "n2", "n3"}
	redisHosts     = []string{"r1", "r2", "r3"}
	schedulerHosts = []string{"s1", "s2"}
	workerHosts    = []string{"w1", "w2", "w3"}
	octets         = map[string]int{"n1": 11, "n2": 12, "n3": 13, "r1": 21, "r2": 22, "r3": 23,
		"s1": 31, "s2": 32, "w1": 41, "w2": 42, "w3": 43}
)

// workerConcurrency is each worker's --concurrency.
const workerConcurrency = 4

// mode is what the paddock binary supports: the Sentinel URL and
// --replicas (issue 27, branch h27-ha). Both are read from its --help, so
// the harness moves to R3 and failover the day they are merged.
type mode struct {
	sentinel bool
	replicas int
}

// fleet is one run's hosts, processes and the test's own connections (the
// test process sits on the bridge at .254, like a pipeline's host).
type fleet struct {
	t      *testing.T
	dir    string
	net    *network
	ip     map[string]string
	bins   bins
	mode   mode
	procs  map[string]*proc
	down   down        // what the current fault stopped
	fenced []fencedRun // the jobs of partitioned workers

	nc     *nats.Conn
	js     jetstream.JetStream
	rdb    redis.UniversalClient
	store  *results.Store
	insp   *asynq.Inspector
	docker *client.Client
}

// detectMode reads what the paddock binary's worker accepts.
func detectMode(paddock string) mode {
	out, _ := exec.Command(paddock, "worker", "--help").CombinedOutput()
	m := mode{replicas: 1}
	help := string(out)
	if strings.Contains(help, "--replicas") {
		m.replicas = 3
	}
	if strings.Contains(help, "redis+sentinel") || strings.Contains(help, "redis-sentinel") {
		m.sentinel = true
	}
	if v := os.Getenv("PADDOCK_FLEET_REPLICAS"); v != "" {
		m.replicas, _ = strconv.Atoi(v)
	}
	return m
}

// addHosts creates every host namespace.
func (f *fleet) addHosts() error {
	f.ip = map[string]string{"test": f.net.subnet + "254"}
	for _, group := range [][]string{natsHosts, redisHosts, schedulerHosts, workerHosts} {
		for _, h := range group {
			ip, err := f.net.addHost(h, octets[h])
			if err != nil {
				return err
			}
			f.ip[h] = ip
		}
	}
	return nil
}

// waitNATS waits until every node of nodes answers /healthz and knows the
// JetStream meta leader (/jsz): it has joined the cluster.
func (f *fleet) waitNATS(ctx context.Context, nodes ...string) error {
	for _, n := range nodes {
		base := fmt.Sprintf("http://%s:%d", f.ip[n], monitorPort)
		if err := poll(ctx, "NATS node "+n+" healthy in the cluster", func() bool {
			r, err := httpClient.Get(base + "/healthz")
			if err != nil {
				return false
			}
			r.Body.Close()
			if r.StatusCode != http.StatusOK {
				return false
			}
			var jsz struct {
				Meta *struct {
					Leader string `json:"leader"`
				} `json:"meta_cluster"`
			}
			r, err = httpClient.Get(base + "/jsz")
			if err != nil {
				return false
			}
			defer r.Body.Close()
			return json.NewDecoder(r.Body).Decode(&jsz) == nil && jsz.Meta != nil && jsz.Meta.Leader != ""
		}); err != nil {
			return err
		}
	}
	return nil
}

// connect opens the test's own NATS connection (all three URLs, reconnect
// forever) and Redis client (through the Sentinels: it follows a failover
// whatever the paddock binary does).
func (f *fleet) connect(ctx context.Context) error {
	nc, err := nats.Connect(f.natsURLs(), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.Timeout(2*time.Second))
	if err != nil {
		return fmt.Errorf("connect NATS: %w", err)
	}
	f.nc = nc
	if f.js, err = jetstream.New(nc); err != nil {
		return err
	}
	f.rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: masterName, SentinelAddrs: f.sentinelAddrs(),
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	if err := poll(ctx, "Redis primary through the Sentinels", func() bool {
		return f.rdb.Ping(ctx).Err() == nil
	}); err != nil {
		return err
	}
	if err := poll(ctx, "JetStream answering", func() bool {
		_, err := f.js.AccountInfo(ctx)
		return err == nil
	}); err != nil {
		return err
	}
	f.store = results.NewStore(f.rdb, f.js, results.StoreConfig{})
	f.insp = asynq.NewInspectorFromRedisClient(f.rdb)
	f.docker, err = client.New(client.FromEnv)
	return err
}

// waitPaddock waits until both schedulers consume and every worker beats.
func (f *fleet) waitPaddock(ctx context.Context) error {
	for _, s := range schedulerHosts {
		if err := f.waitScheduler(ctx, s); err != nil {
			return err
		}
	}
	for _, w := range workerHosts {
		if err := f.waitWorker(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

func (f *fleet) waitScheduler(ctx context.Context, s string) error {
	return f.waitProc(ctx, s, func() bool { return f.procs[s].logHas(`msg="scheduler running"`) })
}

func (f *fleet) waitWorker(ctx context.Context, w string) error {
	return f.waitProc(ctx, w, func() bool {
		n, err := f.rdb.Exists(ctx, "paddock:worker:"+f.workerID(w)).Result()
		return err == nil && n == 1
	})
}

// waitProc polls ready, failing at once (with the log's tail) if the
// process exited and is not supervised, or was restarted 3 times since.
func (f *fleet) waitProc(ctx context.Context, name string, ready func() bool) error {
	p := f.procs[name]
	var died bool
	r0 := p.supervisorRestarts()
	err := poll(ctx, name+" ready", func() bool {
		died = (!p.supervised && !p.running()) || p.supervisorRestarts() > r0+3
		return died || ready()
	})
	if died {
		return fmt.Errorf("%s exited before it was ready:\n%s", name, f.procs[name].tail(30))
	}
	return err
}

// poll checks cond every 100 ms until it holds or ctx ends.
func poll(ctx context.Context, what string, cond func() bool) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// stopAll ends every process: workers first with SIGTERM (they drain and
// remove their boxes), then the rest.
func (f *fleet) stopAll() {
	for _, w := range workerHosts {
		if p := f.procs[w]; p != nil {
			go p.stop(syscall.SIGTERM, 40*time.Second)
		}
	}
	for _, w := range workerHosts {
		if p := f.procs[w]; p != nil && !p.stop(syscall.SIGTERM, 40*time.Second) {
			p.kill()
		}
	}
	for _, p := range f.procs {
		if !p.stop(syscall.SIGTERM, 10*time.Second) {
			p.kill()
		}
	}
}

// close closes the test's own connections.
func (f *fleet) close() {
	if f.nc != nil {
		f.nc.Close()
	}
	if f.rdb != nil {
		f.rdb.Close()
	}
	if f.docker != nil {
		f.docker.Close()
	}
}
