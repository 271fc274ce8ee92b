package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// The HA compose fleet's own project name: another engineer's fleet on
// this engine is `paddock`, and the plain test's projects are pdkct*.
const haProject = "paddock-ha"

// The Sentinel master name of docker-compose.ha.yml.
const haMaster = "mymaster"

// haCompose is docker-compose.yml + docker-compose.ha.yml under haProject,
// with every node published on a free port of 127.0.0.1.
type haCompose struct {
	*compose
	replicas      int
	natsNodes     []string       // nats, nats-2, nats-3
	natsPorts     map[string]int // node → published client port
	redisPorts    map[string]int // data node (redis, redis-2) → published port
	sentinelPorts []int
	net           string            // HA_NET: the network is net.0/24
	ips           map[string]string // service → its fixed address

	jobMu       sync.Mutex
	maxJobBytes uint64 // the largest mean submission the jobs stream held
}

// haRun configures TestComposeHA (`make test-compose-ha` sets it):
//
//	PADDOCK_COMPOSE_HA=1          run at all (it is not part of `make test`)
//	PADDOCK_COMPOSE_JOBS=200      jobs of the tenant dev (default 200)
//	PADDOCK_COMPOSE_WORKERS=3     --scale worker=N (default 3)
//	PADDOCK_COMPOSE_NO_BUILD=1    use the images as they are
//	PADDOCK_COMPOSE_REPORT=FILE   write the measurements as JSON
//	PADDOCK_COMPOSE_FAULTS=both   nats, redis, both (default) or none
//	PADDOCK_REPLICAS=3            what the streams must have (default 3)
type haRun struct {
	jobs, workers int
	build         bool
	report        string
	faults        string
}

func newHACompose(t *testing.T, run haRun) *haCompose {
	t.Helper()
	c := &haCompose{
		compose:    newCompose(t, composeRun{jobs: run.jobs, workers: run.workers}),
		replicas:   3,
		natsNodes:  []string{"nats", "nats-2", "nats-3"},
		natsPorts:  map[string]int{},
		redisPorts: map[string]int{},
	}
	if v := os.Getenv("PADDOCK_REPLICAS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "PADDOCK_REPLICAS")
		c.replicas = n
	}
	c.project = haProject
	c.files = []string{"docker-compose.yml", "docker-compose.ha.yml"}
	// Later entries win (os/exec keeps the last of duplicate keys).
	c.env = append(c.env, "COMPOSE_PROJECT_NAME="+haProject)
	var urls []string
	for i, n := range c.natsNodes {
		p := freePort(t)
		c.natsPorts[n] = p
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
		c.env = append(c.env, fmt.Sprintf("%s=%d", []string{"NATS_PORT", "NATS_2_PORT", "NATS_3_PORT"}[i], p))
	}
	c.natsURL = strings.Join(urls, ",")
	for n, v := range map[string]string{"redis": "REDIS_PORT", "redis-2": "REDIS_2_PORT"} {
		c.redisPorts[n] = freePort(t)
		c.env = append(c.env, fmt.Sprintf("%s=%d", v, c.redisPorts[n]))
	}
	c.redis = fmt.Sprintf("127.0.0.1:%d", c.redisPorts["redis"])
	for i := 1; i <= 3; i++ {
		p := freePort(t)
		c.sentinelPorts = append(c.sentinelPorts, p)
		c.env = append(c.env, fmt.Sprintf("SENTINEL_%d_PORT=%d", i, p))
	}
	c.env = append(c.env, "PADDOCK_REPLICAS="+strconv.Itoa(c.replicas))
	c.net = freeNet(t)
	c.env = append(c.env, "HA_NET="+c.net)
	c.ips = map[string]string{}
	for svc, host := range map[string]int{"nats": 11, "nats-2": 12, "nats-3": 13, "redis": 21, "redis-2": 22,
		"sentinel-1": 31, "sentinel-2": 32, "sentinel-3": 33} {
		c.ips[svc] = fmt.Sprintf("%s.%d", c.net, host)
	}
	// What a run that died before its cleanup left of THIS project only.
	if out, err := c.compose.compose(5*time.Minute, "down", "-v", "--timeout", "10"); err != nil {
		t.Logf("docker-compose -p %s down (before): %v\n%s", haProject, err, out)
	}
	return c
}

// TestComposeHA brings up the HA topology (3 NATS nodes with R3 streams,
// Redis primary + replica + 3 sentinels, 2 schedulers, N workers), checks
// that every node and sentinel demands credentials and that the cluster and
// Sentinel are formed, runs a batch of the dev tenant's jobs and, during it,
// docker-kills the NATS node that leads the tenant's jobs stream and then
// the Redis primary. Afterwards: every job has exactly one terminal result
// (the one the CLI saw, the one in the stream, the one in Redis: republished
// copies allowed, a second different result not), nothing is left in the
// queues, the killed nodes rejoin (the old primary as a replica), and `down`
// leaves no container. It logs and reports the failover times and what a job
// costs in Redis and in NATS.
func TestComposeHA(t *testing.T) {
	if os.Getenv("PADDOCK_COMPOSE_HA") != "1" {
		t.Skip("the HA compose fleet (11 service containers + workers, minutes): `make test-compose-ha` (PADDOCK_COMPOSE_HA=1)")
	}
	started := time.Now()
	run := haRunFromEnv(t)
	c := newHACompose(t, run)
	if run.build {
		c.buildImages()
	}
	t0 := time.Now()
	c.up(run.workers)
	c.waitAllHealthy(run.workers, 4*time.Minute)
	healthy := time.Since(t0)
	t.Logf("HA stack healthy in %s (%d workers)", healthy.Round(time.Millisecond), run.workers)
	c.recordOwners()
	c.creds = c.copyCreds()
	c.checkAuthRequired()
	c.checkHAAuthRequired()

	nc, err := nats.Connect(c.natsURL, nats.Timeout(5*time.Second), nats.UserCredentials(c.creds.admin),
		nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c.checkTopology(ctx, js)
	pubs := c.watchResults(nc)

	idle, clients := c.idleRedisRate(ctx, 10*time.Second)
	before := c.redisFootprint(ctx, nil)
	var faults []haFault
	faultsDone := make(chan struct{})
	submitStart := time.Now()
	go func() {
		defer close(faultsDone)
		faults = c.injectFaults(ctx, js, run, submitStart)
	}()
	results := c.submit(ctx, haBatch(run.jobs), 15*time.Minute)
	wall := time.Since(submitStart)
	<-faultsDone

	completionGaps(results, faults, submitStart)
	c.rejoin(ctx, js, faults)
	c.redis = c.primaryAddr(ctx)
	reruns := c.checkHAResults(ctx, js, run, results, pubs)
	c.checkStreamsReplicated(ctx, js)
	after := c.redisFootprint(ctx, results)
	natsBytes := c.natsFootprint(ctx, js, run.jobs)
	c.checkGateway(ctx)
	c.down()
	took := time.Since(started)

	rate := float64(len(results)) / wall.Seconds()
	t.Logf("%d jobs in %s (%.2f jobs/s) through %d faults, %d re-runs; whole test %s",
		len(results), wall.Round(time.Millisecond), rate, len(faults), reruns, took.Round(time.Second))
	for _, f := range faults {
		t.Logf("fault: %s (%s) at %.1f s: %s in %s; longest pause between completions in the next minute %.1f s; back in its role %.1f s after docker start",
			f.What, f.Victim, f.AtS, f.Recovered, f.RecoverySeconds(), f.GapS, f.RejoinS)
	}
	redisPerJob := after.perJob(before, run.jobs)
	t.Logf("Redis per job: %.1f keys, %.0f bytes (MEMORY USAGE), %.0f bytes of used_memory; by key: %v",
		redisPerJob.Keys, redisPerJob.Bytes, redisPerJob.UsedMemory, after.byPattern(run.jobs))
	t.Logf("NATS per job: %v", natsBytes)
	t.Logf("idle fleet (%d workers, 2 schedulers): %.1f Redis commands/s on the primary, %d clients connected (sentinels and replica included)",
		run.workers, idle, clients)
	if run.report != "" {
		rep, _ := json.MarshalIndent(map[string]any{
			"jobs": run.jobs, "workers": run.workers, "replicas": c.replicas, "healthy_s": healthy.Seconds(),
			"wall_s": wall.Seconds(), "jobs_per_s": rate, "reruns": reruns, "faults": faults,
			"redis_per_job": redisPerJob, "redis_keys_by_pattern": after.byPattern(run.jobs),
			"nats_bytes_per_job": natsBytes, "idle_redis_commands_per_s": idle, "idle_redis_clients": clients, "test_s": took.Seconds(),
		}, "", "  ")
		require.NoError(t, os.WriteFile(run.report, append(rep, '\n'), 0o644))
	}
}

func haRunFromEnv(t *testing.T) haRun {
	r := haRun{jobs: 200, workers: 3, build: os.Getenv("PADDOCK_COMPOSE_NO_BUILD") != "1",
		report: os.Getenv("PADDOCK_COMPOSE_REPORT"), faults: envOr("PADDOCK_COMPOSE_FAULTS", "both")}
	require.Contains(t, []string{"nats", "redis", "both", "none"}, r.faults, "PADDOCK_COMPOSE_FAULTS")
	for name, dst := range map[string]*int{"PADDOCK_COMPOSE_JOBS": &r.jobs, "PADDOCK_COMPOSE_WORKERS": &r.workers} {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, name)
			require.Positive(t, n, name)
			*dst = n
		}
	}
	require.GreaterOrEqual(t, r.jobs, 20, "the faults come at a quarter and a half of the batch")
	return r
}

// haBatch: every job echoes its number after half a second (so that every
// worker holds jobs when a fault comes), every tenth after 3 s.
func haBatch(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		cmd := fmt.Sprintf("sleep 0.5; echo job-%d", i)
		if i%10 == 0 {
			cmd = fmt.Sprintf("sleep 3; echo job-%d", i)
		}
		line, _ := json.Marshal(map[string]any{"command": cmd, "labels": map[string]string{"n": strconv.Itoa(i)}})
		b.Write(append(line, '\n'))
	}
	return b.Bytes()
}

// waitAllHealthy waits until every long-running service of the HA file and
// docker-compose.yml is healthy. A service that exits meanwhile is
// restarted by its policy and logged, not failed: on a loaded machine a
// fresh cluster may not create a replicated stream in a scheduler's first
// start-up deadline.
func (c *haCompose) waitAllHealthy(workers int, timeout time.Duration) {
	c.t.Helper()
	services := []string{"scheduler", "worker", "gateway", "redis", "redis-2", "sentinel-1", "sentinel-2", "sentinel-3"}
	services = append(services, c.natsNodes...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	restarted := map[string]bool{}
	var healthy, total int
	var bad []string
	// Each round runs docker ps: once a second.
	if !testsvc.Poll(ctx, time.Second, func() bool {
		healthy, total, bad = 0, 0, nil
		for _, svc := range services {
			for _, ct := range c.containers(svc) {
				total++
				switch {
				case strings.Contains(ct.status, "(healthy)"):
					healthy++
				case strings.HasPrefix(ct.status, "Restarting"), strings.HasPrefix(ct.status, "Exited"):
					if !restarted[ct.name] {
						c.t.Logf("%s restarts during start-up: %s", ct.name, ct.status)
						restarted[ct.name] = true
					}
					bad = append(bad, ct.name+": "+ct.status)
				default:
					bad = append(bad, ct.name+": "+ct.status)
				}
			}
		}
		return len(c.containers("worker")) == workers && healthy == total && total == len(services)+workers
	}) {
		c.dumpLogs()
		c.t.Fatalf("not healthy after %s (%d of %d): %v", timeout, healthy, total, bad)
	}
}

// sentinel connects to sentinel i (0-2) as paddock with the fleet's password.
func (c *haCompose) sentinel(i int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", c.sentinelPorts[i]),
		Username: "paddock", Password: c.creds.redisPassword, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
		Protocol: 2}) // RESP2: SENTINEL MASTER as a flat list (sentinelMaster)
}

// node connects to a Redis data node by its compose name, as the services do.
func (c *haCompose) node(name string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", c.redisPorts[name]),
		Username: "paddock", Password: c.creds.redisPassword, DialTimeout: 2 * time.Second})
}

// primary asks the sentinels, in turn, which data node is the primary,
// and returns its service name.
func (c *haCompose) primary(ctx context.Context) (string, error) {
	var last error
	for i := range c.sentinelPorts {
		s := c.sentinel(i)
		addr, err := s.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", haMaster).StringSlice()
		s.Close()
		if err == nil && len(addr) == 2 {
			for _, n := range []string{"redis", "redis-2"} {
				if c.ips[n] == addr[0] {
					return n, nil
				}
			}
			return "", fmt.Errorf("sentinel-%d names %s, no data node's address", i+1, addr[0])
		}
		last = fmt.Errorf("sentinel-%d: %v %v", i+1, addr, err)
	}
	return "", last
}

// freeNet picks a 10.232.X /24 that no route of this host (another
// network, another engineer's namespaces) uses.
func freeNet(t *testing.T) string {
	out, err := exec.Command("ip", "-4", "route").CombinedOutput()
	require.NoError(t, err, "ip route: %s", out)
	for range 100 {
		b := make([]byte, 1)
		_, _ = rand.Read(b)
		n := fmt.Sprintf("10.232.%d", 1+int(b[0])%250)
		if !strings.Contains(string(out), n+".") {
			return n
		}
	}
	t.Fatal("no free 10.232.X.0/24")
	return ""
}

// primaryAddr is the published address of the current primary.
func (c *haCompose) primaryAddr(ctx context.Context) string {
	c.t.Helper()
	name, err := c.primary(ctx)
	require.NoError(c.t, err)
	p, ok := c.redisPorts[name]
	require.True(c.t, ok, "the sentinels name an unknown primary %q", name)
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// checkHAAuthRequired: every NATS node refuses an anonymous client, every
// data node answers NOAUTH without the password; a sentinel tells anyone
// which node is the primary but refuses everything else (NOPERM) unless
// the client is paddock with the password.
func (c *haCompose) checkHAAuthRequired() {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range c.natsNodes {
		nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", c.natsPorts[n]), nats.Timeout(5*time.Second), nats.NoReconnect())
		if err == nil {
			nc.Close()
		}
		assert.ErrorIs(t, err, nats.ErrAuthorization, "%s: an anonymous NATS connection must be refused", n)
	}
	for name, p := range c.redisPorts {
		a := fmt.Sprintf("127.0.0.1:%d", p)
		for _, o := range []*redis.Options{{Addr: a}, {Addr: a, Password: "not-the-password"}, {Addr: a, Username: "paddock", Password: "not-the-password"}} {
			rdb := redis.NewClient(o)
			err := rdb.Ping(ctx).Err()
			rdb.Close()
			if assert.Error(t, err, "%s without the password", name) {
				assert.Regexp(t, `^(NOAUTH|WRONGPASS) `, err.Error(), "%s without the password", name)
			}
		}
	}
	for i, p := range c.sentinelPorts {
		anon := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p), Protocol: 2})
		addr, err := anon.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", haMaster).StringSlice()
		assert.NoError(t, err, "sentinel-%d: discovery without credentials", i+1)
		assert.Len(t, addr, 2, "sentinel-%d: the primary's address", i+1)
		for _, cmd := range [][]any{{"SENTINEL", "MASTER", haMaster}, {"SENTINEL", "SET", haMaster, "quorum", "1"},
			{"SENTINEL", "FAILOVER", haMaster}, {"SENTINEL", "REMOVE", haMaster}, {"SENTINEL", "CONFIG", "GET", "*"}, {"SENTINEL", "RESET", "*"}, {"ACL", "LIST"}, {"SHUTDOWN"}} {
			err := anon.Do(ctx, cmd...).Err()
			if assert.Error(t, err, "sentinel-%d: %v without credentials", i+1, cmd) {
				assert.Regexp(t, `^NOPERM `, err.Error(), "sentinel-%d: %v without credentials", i+1, cmd)
			}
		}
		anon.Close()
		wrong := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p), Username: "paddock", Password: "not-the-password"})
		assert.Error(t, wrong.Ping(ctx).Err(), "sentinel-%d: a wrong password", i+1)
		wrong.Close()
		s := c.sentinel(i)
		_, err = sentinelMaster(ctx, s)
		assert.NoError(t, err, "sentinel-%d: SENTINEL MASTER as paddock", i+1)
		s.Close()
	}
}

// sentinelMaster is SENTINEL MASTER's answer as a map.
func sentinelMaster(ctx context.Context, s *redis.Client) (map[string]string, error) {
	kv, err := s.Do(ctx, "SENTINEL", "MASTER", haMaster).StringSlice()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m, nil
}

// checkTopology: the three sentinels agree that redis is the primary with
// one replica and know each other; redis-2 replicates it; the dev tenant's
// streams are on all three NATS nodes, and JetStream answers through each.
func (c *haCompose) checkTopology(ctx context.Context, js jetstream.JetStream) {
	t := c.t
	assert.EventuallyWithT(t, func(ct *assert.CollectT) {
		for i := range c.sentinelPorts {
			s := c.sentinel(i)
			m, err := sentinelMaster(ctx, s)
			s.Close()
			if !assert.NoError(ct, err, "sentinel-%d", i+1) {
				continue
			}
			assert.Equal(ct, c.ips["redis"], m["ip"], "sentinel-%d: the first primary", i+1)
			assert.Equal(ct, "master", m["flags"], "sentinel-%d: flags", i+1)
			assert.Equal(ct, "1", m["num-slaves"], "sentinel-%d: replicas", i+1)
			assert.Equal(ct, "2", m["num-other-sentinels"], "sentinel-%d: the other sentinels", i+1)
			assert.Equal(ct, "2", m["quorum"], "sentinel-%d: quorum", i+1)
		}
		r := c.node("redis-2")
		info, err := r.Info(ctx, "replication").Result()
		r.Close()
		assert.NoError(ct, err)
		assert.Contains(ct, info, "role:slave", "redis-2")
		assert.Contains(ct, info, "master_host:"+c.ips["redis"]+"\r", "redis-2 replicates redis")
		assert.Contains(ct, info, "master_link_status:up", "redis-2")
	}, time.Minute, 500*time.Millisecond, "Sentinel formed")

	for _, n := range c.natsNodes {
		nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", c.natsPorts[n]), nats.UserCredentials(c.creds.admin), nats.NoReconnect())
		if !assert.NoError(t, err, "%s as admin", n) {
			continue
		}
		njs, err := jetstream.New(nc)
		require.NoError(t, err)
		_, err = njs.AccountInfo(ctx)
		assert.NoError(t, err, "%s: JetStream answers", n)
		nc.Close()
	}
	c.checkStreamsReplicated(ctx, js)
}

// checkStreamsReplicated: every stream of the account (the tenants' jobs
// and results, the KV and object buckets) has c.replicas replicas, a
// leader, and every other replica current.
func (c *haCompose) checkStreamsReplicated(ctx context.Context, js jetstream.JetStream) {
	t := c.t
	var names []string
	assert.EventuallyWithT(t, func(ct *assert.CollectT) {
		names = names[:0]
		l := js.ListStreams(ctx)
		for info := range l.Info() {
			names = append(names, info.Config.Name)
			assert.Equal(ct, c.replicas, info.Config.Replicas, "stream %s: replicas", info.Config.Name)
			if !assert.NotNil(ct, info.Cluster, "stream %s: cluster info", info.Config.Name) {
				continue
			}
			assert.NotEmpty(ct, info.Cluster.Leader, "stream %s: leader", info.Config.Name)
			assert.Len(ct, info.Cluster.Replicas, c.replicas-1, "stream %s: peers", info.Config.Name)
			for _, p := range info.Cluster.Replicas {
				assert.True(ct, p.Current && !p.Offline, "stream %s: replica %s current %v offline %v", info.Config.Name, p.Name, p.Current, p.Offline)
			}
		}
		assert.NoError(ct, l.Err())
		assert.Contains(ct, names, job.JobsStream("dev"))
		assert.Contains(ct, names, job.ResultsStream("dev"))
	}, 2*time.Minute, time.Second, "streams replicated")
	slices.Sort(names)
	t.Logf("streams with %d replicas: %v", c.replicas, names)
}

// watchResults counts every result publication per job key (as the admin,
// who may read every tenant's results): a republished copy of the stored
// result is the same result, a second different one would not be.
type publications struct {
	mu sync.Mutex
	m  map[string][]job.Result
}

func (c *haCompose) watchResults(nc *nats.Conn) *publications {
	p := &publications{m: map[string][]job.Result{}}
	sub, err := nc.Subscribe(job.ResultSubjects("dev"), func(m *nats.Msg) {
		var r job.Result
		if json.Unmarshal(m.Data, &r) == nil {
			p.mu.Lock()
			p.m[r.Key()] = append(p.m[r.Key()], r)
			p.mu.Unlock()
		}
	})
	require.NoError(c.t, err)
	require.NoError(c.t, sub.SetPendingLimits(-1, -1))
	require.NoError(c.t, nc.Flush())
	c.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return p
}

// haFault is one fault injected during the batch and what it cost.
type haFault struct {
	What      string  `json:"what"`
	Victim    string  `json:"victim"` // the compose service
	AtS       float64 `json:"at_s"`   // after the first submission
	Recovered string  `json:"recovered"`
	// RecoveryS: from the kill to what Recovered names.
	RecoveryS float64 `json:"recovery_s"`
	// GapS: the longest pause between two job completions in the minute
	// after the kill (the batch's own gaps included).
	GapS      float64 `json:"completion_gap_s"`
	RejoinS   float64 `json:"rejoin_s"` // docker start to back in its role
	container string
}

func (f haFault) RecoverySeconds() string { return fmt.Sprintf("%.1f s", f.RecoveryS) }

// injectFaults kills the NATS node leading the jobs stream once a quarter of
// the jobs have results, then the Redis primary at half (run.faults says
// which). It always follows the batch to its end (the jobs stream's peak).
func (c *haCompose) injectFaults(ctx context.Context, js jetstream.JetStream, run haRun, start time.Time) []haFault {
	var faults []haFault
	if c.waitResults(ctx, js, run.jobs/4) && (run.faults == "nats" || run.faults == "both") {
		faults = append(faults, c.killNATSLeader(ctx, js, start))
	}
	if c.waitResults(ctx, js, run.jobs/2) && (run.faults == "redis" || run.faults == "both") {
		faults = append(faults, c.killPrimary(ctx, start))
	}
	c.waitResults(ctx, js, run.jobs)
	return faults
}

// waitResults polls the dev tenant's results stream until it holds n, and
// notes the largest submission the jobs stream held meanwhile.
func (c *haCompose) waitResults(ctx context.Context, js jetstream.JetStream, n int) bool {
	return testsvc.Poll(ctx, 200*time.Millisecond, func() bool {
		// Each poll its own deadline (see killNATSLeader).
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if st, err := js.Stream(pctx, job.JobsStream("dev")); err == nil {
			if info, err := st.Info(pctx); err == nil && info.State.Msgs > 0 {
				c.noteJobBytes(info.State.Bytes / info.State.Msgs)
			}
		}
		done := false
		if st, err := js.Stream(pctx, job.ResultsStream("dev")); err == nil {
			if info, err := st.Info(pctx); err == nil && info.State.Msgs >= uint64(n) {
				done = true
			}
		}
		cancel()
		return done
	})
}

func (c *haCompose) noteJobBytes(b uint64) {
	c.jobMu.Lock()
	c.maxJobBytes = max(c.maxJobBytes, b)
	c.jobMu.Unlock()
}

// kill docker-kills the service's one container. It returns the container
// and when the kill was asked: recoveries are timed from then (an upper
// bound: `docker kill` itself takes a while on a loaded engine).
func (c *haCompose) kill(service string) (string, time.Time) {
	cts := c.containers(service)
	require.Len(c.t, cts, 1, "one container of %s", service)
	at := time.Now()
	out, err := c.cmd(time.Minute, "docker", "kill", cts[0].id)
	assert.NoError(c.t, err, "docker kill %s: %s", service, out)
	c.t.Logf("docker kill %s took %s", service, time.Since(at).Round(time.Millisecond))
	return cts[0].id, at
}

// killNATSLeader docker-kills the node that leads the jobs stream (the
// restart policy leaves it dead) and waits for another node to lead it.
func (c *haCompose) killNATSLeader(ctx context.Context, js jetstream.JetStream, start time.Time) haFault {
	// The stream's peers do not mark a dead peer offline (nor behind, while
	// nothing is published): a new leader is the sign. It is timed from
	// before `docker kill`, which takes seconds here: the election may be
	// over when the kill returns.
	f := haFault{What: "kill -9 the NATS node leading " + job.JobsStream("dev"), Recovered: "another node leads the stream"}
	leader := func() string {
		// Each poll its own deadline: a request sent while the connection
		// moves off the dead node gets no answer.
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, job.JobsStream("dev"))
		if err != nil {
			return ""
		}
		in, err := st.Info(ctx)
		if err != nil || in.Cluster == nil {
			return ""
		}
		return in.Cluster.Leader
	}
	testsvc.Poll(ctx, 100*time.Millisecond, func() bool { f.Victim = leader(); return f.Victim != "" })
	require.Contains(c.t, c.natsNodes, f.Victim, "the jobs stream's leader is a node of this fleet")
	var killed time.Time
	f.container, killed = c.kill(f.Victim)
	f.AtS = killed.Sub(start).Seconds()
	testsvc.Poll(ctx, 100*time.Millisecond, func() bool { l := leader(); return l != "" && l != f.Victim })
	f.RecoveryS = time.Since(killed).Seconds()
	return f
}

// killPrimary docker-kills the Redis primary and waits until the sentinels
// name another one.
func (c *haCompose) killPrimary(ctx context.Context, start time.Time) haFault {
	f := haFault{What: "kill -9 the Redis primary", Recovered: "the sentinels promote the replica"}
	var err error
	f.Victim, err = c.primary(ctx)
	require.NoError(c.t, err)
	var killed time.Time
	f.container, killed = c.kill(f.Victim)
	f.AtS = killed.Sub(start).Seconds()
	testsvc.Poll(ctx, 100*time.Millisecond, func() bool { p, err := c.primary(ctx); return err == nil && p != f.Victim })
	f.RecoveryS = time.Since(killed).Seconds()
	return f
}

// rejoin starts the killed containers again: the NATS node catches up (every
// stream's replicas current again, checked by checkStreamsReplicated) and
// the old primary comes back as a replica of the new one.
func (c *haCompose) rejoin(ctx context.Context, js jetstream.JetStream, faults []haFault) {
	t := c.t
	for i := range faults {
		f := &faults[i]
		t0 := time.Now()
		out, err := c.cmd(time.Minute, "docker", "start", f.container)
		require.NoError(t, err, "docker start %s: %s", f.Victim, out)
		if _, isRedis := c.redisPorts[f.Victim]; isRedis {
			assert.EventuallyWithT(t, func(ct *assert.CollectT) {
				p, err := c.primary(ctx)
				assert.NoError(ct, err)
				r := c.node(f.Victim)
				info, err := r.Info(ctx, "replication").Result()
				r.Close()
				assert.NoError(ct, err)
				assert.Contains(ct, info, "role:slave", "%s came back as a replica", f.Victim)
				assert.Contains(ct, info, "master_host:"+c.ips[p]+"\r", "%s replicates the new primary %s", f.Victim, p)
				assert.Contains(ct, info, "master_link_status:up", f.Victim)
			}, 2*time.Minute, 500*time.Millisecond, "the old primary rejoins")
		} else {
			c.checkStreamsReplicated(ctx, js)
		}
		f.RejoinS = time.Since(t0).Seconds()
	}
}

// checkHAResults: every job has exactly one terminal result, the same in the
// CLI's output, in every publication the test saw, in the stream and in
// Redis; it succeeded, on a worker of this fleet; the queues are empty.
// It returns how many jobs ran more than once (after an infrastructure
// fault: the result says so in runs).
func (c *haCompose) checkHAResults(ctx context.Context, js jetstream.JetStream, run haRun, results []job.Result, pubs *publications) int {
	t := c.t
	require.Len(t, results, run.jobs, "one result line per job")
	owners := c.ownerList()
	st, err := js.Stream(ctx, job.ResultsStream("dev"))
	require.NoError(t, err)
	seen := map[string]bool{}
	reruns := 0
	same := func(a, b job.Result) bool {
		return a.ID == b.ID && a.State == b.State && a.Worker == b.Worker && a.FinishedAt.Equal(b.FinishedAt)
	}
	rdb := c.redisClient()
	defer rdb.Close()
	for _, r := range results {
		n := r.Labels["n"]
		assert.False(t, seen[n], "job n=%s reported twice", n)
		seen[n] = true
		assert.Equal(t, job.StateSucceeded, r.State, "job n=%s: %s %s", n, r.Reason, r.Error)
		assert.Contains(t, r.Stdout.Text, "job-"+n, "job n=%s output", n)
		assert.Contains(t, owners, r.Worker, "job n=%s ran on a worker of this project", n)
		if r.Runs > 1 {
			reruns++
		}
		pubs.mu.Lock()
		for _, p := range pubs.m[r.Key()] {
			assert.True(t, same(p, r), "job n=%s: a second, different result was published: %s on %s at %s (the CLI's: %s on %s at %s)",
				n, p.State, p.Worker, p.FinishedAt, r.State, r.Worker, r.FinishedAt)
		}
		pubs.mu.Unlock()
		if m, err := st.GetLastMsgForSubject(ctx, job.ResultSubject("dev", r.ID)); assert.NoError(t, err, "job n=%s in the stream", n) {
			var sr job.Result
			require.NoError(t, json.Unmarshal(m.Data, &sr))
			assert.True(t, same(sr, r), "job n=%s: the stream holds another result", n)
		}
		if raw, err := rdb.Get(ctx, "paddock:result:"+r.Key()).Bytes(); assert.NoError(t, err, "stored result of n=%s", n) {
			var stored job.Result
			require.NoError(t, json.Unmarshal(raw, &stored))
			assert.True(t, same(stored, r), "job n=%s: Redis holds another result", n)
		}
	}
	for i := 1; i <= run.jobs; i++ {
		assert.True(t, seen[strconv.Itoa(i)], "no result for job n=%d", i)
	}
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(run.jobs), info.State.Msgs, "results stored")
	t.Logf("results stream: %d stored, %d published (republished copies of a stored result included)", info.State.Msgs, info.State.LastSeq)
	c.checkQueuesEmpty(ctx, js, rdb)
	return reruns
}

// checkQueuesEmpty: no submission is left in the jobs stream and no task
// in asynq's lists of the current primary.
func (c *haCompose) checkQueuesEmpty(ctx context.Context, js jetstream.JetStream, rdb *redis.Client) {
	assert.EventuallyWithT(c.t, func(ct *assert.CollectT) {
		jst, err := js.Stream(ctx, job.JobsStream("dev"))
		if assert.NoError(ct, err) {
			info, err := jst.Info(ctx)
			if assert.NoError(ct, err) {
				assert.Zero(ct, info.State.Msgs, "submissions left in %s", job.JobsStream("dev"))
			}
		}
		queues, err := rdb.SMembers(ctx, "asynq:queues").Result()
		assert.NoError(ct, err)
		for _, q := range queues {
			p := "asynq:{" + q + "}:"
			for _, k := range []string{"pending", "active"} {
				assert.Zero(ct, rdb.LLen(ctx, p+k).Val(), "%s%s", p, k)
			}
			for _, k := range []string{"scheduled", "retry", "archived"} {
				assert.Zero(ct, rdb.ZCard(ctx, p+k).Val(), "%s%s", p, k)
			}
		}
	}, time.Minute, 500*time.Millisecond, "queues empty")
}

// footprint is what the primary holds: keys, the bytes MEMORY USAGE
// reports for them, used_memory, and with the batch's results, keys and
// bytes per key pattern (job ids replaced by <key>/<id>).
type footprint struct {
	keys, bytes, usedMemory int64
	patterns                map[string][2]int64 // pattern → keys, bytes
}

// perJob is what one job adds to Redis.
type perJob struct {
	Keys       float64 `json:"keys"`
	Bytes      float64 `json:"memory_usage_bytes"`
	UsedMemory float64 `json:"used_memory_bytes"`
}

func (f footprint) perJob(before footprint, jobs int) perJob {
	n := float64(jobs)
	return perJob{Keys: float64(f.keys-before.keys) / n, Bytes: float64(f.bytes-before.bytes) / n,
		UsedMemory: float64(f.usedMemory-before.usedMemory) / n}
}

// byPattern: "pattern": "keys per job, bytes per job".
func (f footprint) byPattern(jobs int) map[string]string {
	out := map[string]string{}
	for p, v := range f.patterns {
		out[p] = fmt.Sprintf("%.2f keys, %.0f B", float64(v[0])/float64(jobs), float64(v[1])/float64(jobs))
	}
	return out
}

func (c *haCompose) redisFootprint(ctx context.Context, results []job.Result) footprint {
	t := c.t
	c.redis = c.primaryAddr(ctx)
	rdb := c.redisClient()
	defer rdb.Close()
	var pairs []string
	for _, r := range results {
		pairs = append(pairs, r.Key(), "<key>")
	}
	for _, r := range results {
		pairs = append(pairs, r.ID, "<id>")
	}
	repl := strings.NewReplacer(pairs...)
	f := footprint{patterns: map[string][2]int64{}}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		b, err := rdb.MemoryUsage(ctx, k).Result()
		if err != nil {
			continue // expired meanwhile
		}
		f.keys++
		f.bytes += b
		p := repl.Replace(k)
		v := f.patterns[p]
		f.patterns[p] = [2]int64{v[0] + 1, v[1] + b}
	}
	require.NoError(t, iter.Err())
	info, err := rdb.Info(ctx, "memory").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			f.usedMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if results == nil {
		f.patterns = nil
	} else {
		// Keep the patterns a job makes (at least a tenth of the jobs).
		for p, v := range f.patterns {
			if v[0] < int64(len(results)/10) {
				delete(f.patterns, p)
			}
		}
	}
	return f
}

// natsFootprint: bytes per job in the dev tenant's streams (the results
// stream after the batch; a submission while it waits in the jobs stream),
// and on the cluster's disks (× replicas).
func (c *haCompose) natsFootprint(ctx context.Context, js jetstream.JetStream, jobs int) map[string]float64 {
	t := c.t
	st, err := js.Stream(ctx, job.ResultsStream("dev"))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	res := float64(info.State.Bytes) / float64(jobs)
	c.jobMu.Lock()
	sub := float64(c.maxJobBytes)
	c.jobMu.Unlock()
	return map[string]float64{
		"results_stream_bytes": res, "submission_bytes_while_queued": sub,
		"replicas": float64(c.replicas), "disk_bytes_all_replicas": (res + sub) * float64(c.replicas),
	}
}

// completionGaps sets each fault's GapS: the longest pause between two
// consecutive job completions in the minute after it.
func completionGaps(results []job.Result, faults []haFault, start time.Time) {
	var done []time.Time
	for _, r := range results {
		done = append(done, r.FinishedAt)
	}
	slices.SortFunc(done, func(a, b time.Time) int { return a.Compare(b) })
	for i := range faults {
		from := start.Add(time.Duration(faults[i].AtS * float64(time.Second)))
		to := from.Add(time.Minute)
		prev := from
		for _, d := range done {
			if d.Before(from) {
				continue
			}
			if d.After(to) {
				break
			}
			faults[i].GapS = max(faults[i].GapS, d.Sub(prev).Seconds())
			prev = d
		}
	}
}

// idleRedisRate: the commands per second the idle fleet sends the primary
// (heartbeats, polls, rescuer scans, hold checks), over window, and the
// clients connected to it.
func (c *haCompose) idleRedisRate(ctx context.Context, window time.Duration) (float64, int64) {
	c.redis = c.primaryAddr(ctx)
	rdb := c.redisClient()
	defer rdb.Close()
	field := func(section, name string) int64 {
		info, err := rdb.Info(ctx, section).Result()
		require.NoError(c.t, err)
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		c.t.Fatalf("INFO %s: no %s", section, name)
		return 0
	}
	a, t0 := field("stats", "total_commands_processed"), time.Now()
	// sleep: the measurement window itself (the fleet is idle meanwhile).
	time.Sleep(window)
	b := field("stats", "total_commands_processed")
	// Less this client's own first INFO command.
	return float64(b-a-1) / time.Since(t0).Seconds(), field("clients", "connected_clients")
}

// composeHAFile is the part of docker-compose.ha.yml TestComposeHAWiring reads.
type composeHAFile struct {
	Services map[string]struct {
		Command     []string          `json:"command"`
		Environment map[string]string `json:"environment"`
		Volumes     []string          `json:"volumes"`
		Ports       []string          `json:"ports"`
		Networks    map[string]struct {
			IPv4Address string `json:"ipv4_address"`
		} `json:"networks"`
	} `json:"services"`
}

// composeDefault is the default of a "${NAME:-default}" value (or the value).
func composeDefault(v string) string {
	if inner, ok := strings.CutPrefix(v, "${"); ok {
		if _, def, ok := strings.Cut(strings.TrimSuffix(inner, "}"), ":-"); ok {
			return def
		}
	}
	return v
}

// TestComposeHAWiring: the names and addresses in docker-compose.ha.yml
// agree. Every shared service has a fixed address below the dynamic range;
// every Paddock service lists every NATS node by it, schedulers and
// workers every sentinel and the master name the sentinels watch; each
// NATS node has its own server name and store and includes the route
// fragment auth-ha writes for every node; the data nodes know their own
// address and ask every sentinel; only auth-ha mounts the signing keys;
// every port is on 127.0.0.1. TestComposeHA runs it.
func TestComposeHAWiring(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "docker-compose.ha.yml"))
	require.NoError(t, err)
	var cf composeHAFile
	require.NoError(t, yaml.Unmarshal(raw, &cf))
	var nodes, sentinels, natsURLs, natsIPs, sentinelAddrs []string
	stores := map[string]string{"nats": "nats-data"} // docker-compose.yml's
	ip := map[string]string{}
	for name, svc := range cf.Services {
		if a := svc.Networks["default"].IPv4Address; a != "" {
			ip[name] = a
			host, _ := strconv.Atoi(a[strings.LastIndex(a, ".")+1:])
			assert.True(t, strings.HasPrefix(a, "${HA_NET:-") && host > 0 && host < 128,
				"%s: %s is not HA_NET.N below the dynamic range (.128/25)", name, a)
		}
		if svc.Environment["NATS_SERVER_NAME"] != "" {
			nodes = append(nodes, name)
			assert.Equal(t, name, svc.Environment["NATS_SERVER_NAME"], "%s: server name", name)
			assert.Equal(t, []string{"--config", "/etc/nats/paddock-ha.conf"}, svc.Command, "%s: command", name)
			assert.Contains(t, svc.Volumes, "./deploy/ha/nats-ha.conf:/etc/nats/paddock-ha.conf:ro", name)
			for _, v := range svc.Volumes {
				if src, dst, _ := strings.Cut(v, ":"); dst == "/data" {
					stores[name] = src
				}
			}
		}
		if svc.Environment["SENTINEL_NAME"] != "" {
			sentinels = append(sentinels, name)
			assert.Equal(t, name, svc.Environment["SENTINEL_NAME"], "%s: announced name", name)
		}
		for _, p := range svc.Ports {
			assert.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s: port %s beyond 127.0.0.1", name, p)
		}
		for _, v := range svc.Volumes {
			if src, _, _ := strings.Cut(v, ":"); src == "auth" {
				assert.Equal(t, "auth-ha", name, "%s mounts the signing keys", name)
			}
		}
	}
	slices.Sort(nodes)
	slices.Sort(sentinels)
	require.Equal(t, []string{"nats", "nats-2", "nats-3"}, nodes)
	require.Len(t, sentinels, 3)
	for _, n := range nodes {
		require.NotEmpty(t, ip[n], "%s: no fixed address", n)
		natsURLs = append(natsURLs, "nats://"+ip[n]+":4222")
		natsIPs = append(natsIPs, ip[n])
	}
	assert.Len(t, slices.Compact(slices.Sorted(maps.Values(stores))), len(nodes), "a store per NATS node: %v", stores)
	for _, s := range sentinels {
		require.NotEmpty(t, ip[s], "%s: no fixed address", s)
		sentinelAddrs = append(sentinelAddrs, ip[s]+":26379")
		assert.Equal(t, ip[s], cf.Services[s].Environment["SENTINEL_IP"], "%s: announced address", s)
	}
	wantRedis := "redis+sentinel://" + strings.Join(sentinelAddrs, ",") + "/" + haMaster
	for _, name := range []string{"scheduler", "worker", "gateway", "dev-tenant", "admin"} {
		env := cf.Services[name].Environment
		assert.Equal(t, strings.Join(natsURLs, ","), composeDefault(env["PADDOCK_NATS_URL"]), "%s: every NATS node", name)
		assert.Equal(t, "3", composeDefault(env["PADDOCK_REPLICAS"]), "%s: replicas", name)
		if name == "scheduler" || name == "worker" {
			assert.Equal(t, wantRedis, composeDefault(env["PADDOCK_REDIS_URL"]), "%s: the sentinels", name)
		}
	}
	assert.Equal(t, strings.Join(natsIPs, " "), cf.Services["auth-ha"].Environment["NATS_NODES"], "auth-ha: the route URLs")
	for _, name := range []string{"redis", "redis-2"} {
		env := cf.Services[name].Environment
		assert.Equal(t, name, env["REDIS_NODE"], name)
		assert.Equal(t, ip[name], env["REDIS_NODE_IP"], "%s: its own address", name)
		assert.Equal(t, strings.Join(sentinelAddrs, " "), env["SENTINELS"], "%s: asks every sentinel", name)
		assert.Equal(t, haMaster, env["REDIS_MASTER_NAME"], name)
		assert.Equal(t, ip["redis"], env["REDIS_PRIMARY"], name)
	}
	for _, name := range sentinels {
		assert.Equal(t, haMaster, cf.Services[name].Environment["REDIS_MASTER_NAME"], name)
		assert.Equal(t, ip["redis"], cf.Services[name].Environment["REDIS_PRIMARY"], name)
	}
	checkHAConfFiles(t)
	assert.Contains(t, cf.Services["auth-ha"].Volumes, "auth-nats:/to/nats")
}

// checkHAConfFiles: nats-ha.conf includes nats.conf and the route fragment
// that auth-ha.sh writes.
func checkHAConfFiles(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join("ha", "nats-ha.conf"))
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^include "paddock.conf"`, string(conf), "nats-ha.conf includes nats.conf (mounted as paddock.conf)")
	assert.Regexp(t, `(?m)^\s+include "auth/nats-routes.conf"`, string(conf), "nats-ha.conf includes the route fragment")
	script, err := os.ReadFile(filepath.Join("ha", "auth-ha.sh"))
	require.NoError(t, err)
	assert.Contains(t, string(script), "/to/nats/nats-routes.conf", "auth-ha writes the route fragment")
}
