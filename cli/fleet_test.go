package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/gateway"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

// `paddock fleet` on a real fleet: Redis, a 3-node NATS cluster (the
// admin's JetStream and the system account), a scheduler and a real
// worker (worker.Build, Docker) running one job. The table names the
// worker's host, concurrency, running job, warm pool and heartbeat age;
// Redis's role; the NATS servers and the jobs stream's leader. -o json
// says the same as data.
func TestFleetCommandShowsTheFleet(t *testing.T) {
	d := testsvc.Docker(t)
	testsvc.RequireImage(t, d, testsvc.TestImage)
	ctx := context.Background()
	rs := testsvc.StartRedis(t)
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	cl := testsvc.StartNATSClusterWith(t, 3, testsvc.NATSClusterConfig{Accounts: true})
	nc, err := nats.Connect(cl.AppURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	streams := results.StreamConfig{Replicas: 3}
	require.NoError(t, results.EnsureStreams(ctx, js, streams))
	store := results.NewStore(rdb, js, results.StoreConfig{})
	caps := job.Caps{Images: []string{testsvc.TestImage}, DefaultMemoryMB: 64, DefaultPids: 32, DefaultTmpfsMB: 16}
	sch, err := scheduler.New(js, asynq.NewClientFromRedisClient(rdb), store, scheduler.Config{Caps: caps, Streams: streams})
	require.NoError(t, err)
	require.NoError(t, sch.Start(ctx))
	t.Cleanup(sch.Stop)
	owner := testsvc.Unique("fleet")
	w, err := worker.Build(ctx, rdb, d, js, store, worker.Config{ID: owner, Caps: caps, Concurrency: 3, SkipSelfTest: true,
		ShutdownTimeout: 2 * time.Second, Sandbox: sandbox.Config{InitPath: initBinary(t), PoolSize: 1}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	c, err := client.New(nc, client.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Submit(ctx, job.Spec{ID: testsvc.Unique("sleep"), Command: "sleep 60"})
	require.NoError(t, err)

	args := []string{"--redis-url", "unix://" + rs.Addr, "--nats-url", cl.AppURL, "--system-nats-url", cl.SysURL,
		"--data-dir", t.TempDir(), "fleet"}
	var fl scheduler.OperatorFleet
	testsvc.Eventually(t, 60*time.Second, 200*time.Millisecond, func() bool {
		code, out, _ := runCLIOut(t, append(args, "-o", "json")...)
		require.Equal(t, 0, code)
		require.NoError(t, json.Unmarshal([]byte(out), &fl))
		followers := 0
		for _, s := range fl.NATS.Streams {
			for _, r := range s.Replicas {
				if s.Name == job.JobsStream(job.DefaultTenant) && r.Current {
					followers++
				}
			}
		}
		return len(fl.Workers) == 1 && fl.Workers[0].Running == 1 && fl.Workers[0].Pool == 1 && followers == 2
	}, "the worker runs the job with a warm box ready, the jobs stream has two current followers")
	host, _ := os.Hostname()
	wk := fl.Workers[0]
	assert.Equal(t, owner, wk.ID)
	assert.Equal(t, host, wk.Host)
	assert.Equal(t, 3, wk.Concurrency)
	assert.True(t, wk.Alive)
	assert.Equal(t, []scheduler.FleetHost{{Host: host, Workers: 1, WorkersAlive: 1, Concurrency: 3, Running: 1, Pool: 1,
		HeartbeatAgeMS: fl.Hosts[0].HeartbeatAgeMS}}, fl.Hosts)
	assert.Equal(t, "master", fl.Redis.Role)
	require.Len(t, fl.NATS.Servers, 3)
	leader := ""
	for _, s := range fl.NATS.Streams {
		if s.Name == job.JobsStream(job.DefaultTenant) {
			leader = s.Leader
			assert.Len(t, s.Replicas, 2, "R3: two followers")
		}
	}
	st, err := js.Stream(ctx, job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.Equal(t, st.CachedInfo().Cluster.Leader, leader, "the jobs stream's leader")

	code, out, _ := runCLIOut(t, args...)
	require.Equal(t, 0, code)
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(host) + `\s+1\s+1\s+3\s+1\s+1\s+[0-9.]+m?s ago$`)
	assert.Regexp(t, row, out, "the host row: workers, alive, concurrency, running, pool, heartbeat age")
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(owner)+`\s+`+regexp.QuoteMeta(host)+`\s+\d+\s+yes\s+3\s+1\s+1\s+`, out)
	assert.Contains(t, out, "redis      ok, role master, 0 replica(s)")
	assert.Contains(t, out, "3 server(s) answered, meta leader "+cl.Name+"-")
	assert.Regexp(t, `(?m)^`+job.JobsStream(job.DefaultTenant)+`\s+`+regexp.QuoteMeta(leader)+`\s+\d+\s+\S+ current, \S+ current$`, out)
	assert.True(t, strings.Contains(out, "rescued    0 runs"), out)
}

// A part that is not healthy is printed and makes the exit status 1:
// here NATS, which the command cannot reach.
func TestFleetCommandUnhealthyNATS(t *testing.T) {
	rs := testsvc.StartRedis(t)
	tw := newTripwire(t, "tcp")
	code, out, _ := runCLIOut(t, "--redis-url", "unix://"+rs.Addr, "--nats-url", "nats://"+tw.ln.Addr().String(),
		"--data-dir", t.TempDir(), "fleet")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, out, "redis      ok, role master")
	assert.Contains(t, out, "nats       NOT OK: no NATS connection given")
	code, _, stderr := runCLIOut(t, "--redis-url", "unix://"+rs.Addr, "--data-dir", t.TempDir(), "fleet", "--sentinels", "127.0.0.1:1")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr, "--sentinels needs --sentinel-master")
}

func TestSentinelURL(t *testing.T) {
	for _, tc := range []struct {
		url, master string
		hosts       []string
		ok          bool
	}{
		{"redis+sentinel://u:p@h1:1,h2:2,h3:3/mymaster", "mymaster", []string{"h1:1", "h2:2", "h3:3"}, true},
		{"redis-sentinel://:pw@h1:1,h2:2/0?master=m2", "m2", []string{"h1:1", "h2:2"}, true},
		{"redis://127.0.0.1:6379", "", nil, false},
	} {
		fo, ok := sentinelURL(tc.url)
		require.Equal(t, tc.ok, ok, tc.url)
		if ok {
			assert.Equal(t, tc.hosts, fo.SentinelAddrs, tc.url)
			assert.Equal(t, tc.master, fo.MasterName, tc.url)
		}
	}
}

// The gateway's operator page is wired only with a token file the group
// and others cannot read; it then reads the operator view over the
// gateway's Redis (no NATS unless operator creds are given).
func TestOperatorHook(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	g := &globals{logger: slog.New(slog.DiscardHandler)}
	var cfg gateway.Config
	require.NoError(t, operatorHook(ctx, g, &gatewayFlags{}, rdb, &cfg))
	assert.Empty(t, cfg.OperatorToken, "no file, no operator page")

	file := filepath.Join(t.TempDir(), "operator.token")
	require.NoError(t, os.WriteFile(file, []byte(strings.Repeat("k", 40)+"\n"), 0o644))
	err := operatorHook(ctx, g, &gatewayFlags{operatorTokenFile: file}, rdb, &cfg)
	assert.ErrorContains(t, err, "mode 0644")
	require.NoError(t, os.Chmod(file, 0o600))
	require.NoError(t, operatorHook(ctx, g, &gatewayFlags{operatorTokenFile: file}, rdb, &cfg))
	assert.Equal(t, strings.Repeat("k", 40), cfg.OperatorToken)
	v, err := cfg.OperatorFleet(ctx)
	require.NoError(t, err)
	f := v.(scheduler.OperatorFleet)
	assert.True(t, f.Redis.OK)
	assert.Equal(t, "no NATS connection given", f.NATS.Error)
}
