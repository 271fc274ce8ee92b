package fleettest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFleet builds the fleet, runs the workload with the faults one after
// another, then checks from the streams and Redis (docs/reliability.md,
// "Fleet harness").
func TestFleet(t *testing.T) {
	level := os.Getenv("PADDOCK_FLEET")
	if level != "full" && level != "short" {
		t.Skip("the fleet harness runs with PADDOCK_FLEET=full (make test-fleet) or PADDOCK_FLEET=short, as root with ip(8), iptables(8), redis-server and Docker")
	}
	requireHost(t)
	short := level == "short"
	total := 5000
	if short {
		total = 300
	}
	if v := os.Getenv("PADDOCK_FLEET_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "PADDOCK_FLEET_JOBS")
		total = n
	}
	// go-redis logs every failed dial: thousands of lines per fault.
	redis.SetLogger(quietRedis{})
	cleanStale(t)
	f := setup(t)
	rep := f.run(t, total, short)
	name := "fleet.json"
	if short {
		name = "fleet-short.json"
	}
	path, err := rep.write(name)
	require.NoError(t, err)
	t.Logf("wrote %s", path)
	f.verdict(t, rep)
}

// quietRedis drops go-redis's internal log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// requireHost fails (the run was asked for) when the machine cannot host
// the fleet, saying what is missing.
func requireHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the fleet harness makes network namespaces: run it as root (make test-fleet)")
	}
	for _, bin := range []string{"ip", "iptables", "redis-server", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not on PATH (make setup installs iproute2, iptables, redis-server)", bin)
		}
	}
}

// cleanStale removes what crashed runs left: their namespaces and
// processes, and the boxes of their workers.
func cleanStale(t *testing.T) {
	stale := staleRuns()
	if len(stale) == 0 {
		return
	}
	d, err := client.New(client.FromEnv)
	require.NoError(t, err)
	defer d.Close()
	for _, run := range stale {
		removeRun(run)
		n, err := removeBoxes(context.Background(), d, prefix+run+"-")
		require.NoError(t, err)
		t.Logf("removed the leftovers of crashed run %s (namespaces, processes, %d boxes)", run, n)
	}
}

// setup builds the binaries and the network and starts every service.
// Teardown runs on t.Cleanup and on SIGINT/SIGTERM.
func setup(t *testing.T) *fleet {
	n, err := newNetwork()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", prefix+n.run+"-")
	require.NoError(t, err)
	f := &fleet{t: t, dir: dir, net: n, procs: map[string]*proc{}}
	var once sync.Once
	down := func() { once.Do(f.teardown) }
	t.Cleanup(down)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			fmt.Fprintln(os.Stderr, "fleet: interrupted, removing the fleet …")
			down()
			os.Exit(1)
		}
	}()
	t.Cleanup(func() { signal.Stop(sigs); close(sigs) })
	start := time.Now()
	f.bins, err = buildBins(dir)
	require.NoError(t, err)
	f.mode = detectMode(f.bins.paddock)
	t.Logf("fleet %s: binaries built in %.0f s; logs in %s; replicas %d, Sentinel URL %v", n.run,
		time.Since(start).Seconds(), dir, f.mode.replicas, f.mode.sentinel)
	require.NoError(t, f.addHosts())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, f.startNATS())
	require.NoError(t, f.startRedis())
	require.NoError(t, f.waitNATS(ctx, natsHosts...), f.tails())
	require.NoError(t, f.connect(ctx), f.tails())
	require.NoError(t, f.startPaddock())
	require.NoError(t, f.waitPaddock(ctx), f.tails())
	t.Logf("fleet %s up in %.0f s: NATS %s, Redis primary %s (Sentinels %s), schedulers %v, workers %v",
		n.run, time.Since(start).Seconds(), f.natsURLs(), f.ip["r1"], strings.Join(f.sentinelAddrs(), ","),
		schedulerHosts, workerHosts)
	return f
}

// teardown stops every process, removes the fleet's boxes, the network
// and (on success) the logs.
func (f *fleet) teardown() {
	f.stopAll()
	if f.docker != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if n, err := removeBoxes(ctx, f.docker, prefix+f.net.run+"-"); err != nil || n > 0 {
			f.t.Logf("teardown removed %d boxes of the fleet (%v)", n, err)
		}
		cancel()
	}
	f.close()
	f.net.teardown()
	if f.t.Failed() {
		f.t.Logf("the fleet's logs stay in %s", f.dir)
		return
	}
	os.RemoveAll(f.dir)
}

// tails is the last lines of every process's log, for a failure message.
func (f *fleet) tails() string {
	var b strings.Builder
	for name, p := range f.procs {
		fmt.Fprintf(&b, "---- %s (%s):\n%s\n", name, p.log, p.tail(15))
	}
	return b.String()
}

// verdict asserts the report's numbers and says what to do on failure.
func (f *fleet) verdict(t *testing.T, rep *report) {
	ok := assert.Equal(t, rep.Jobs, rep.Accepted, "accepted jobs")
	ok = assert.Zero(t, rep.Lost, "lost jobs") && ok
	ok = assert.Zero(t, rep.Doubled, "jobs run twice without a recorded re-run") && ok
	ok = assert.Zero(t, rep.LeftoverBoxes, "boxes left on the engine") && ok
	ok = assert.Zero(t, rep.QueueLeft, "tasks left in the queues") && ok
	ok = assert.Zero(t, rep.JobsLeft, "submissions left in the jobs streams") && ok
	for _, fr := range rep.Faults {
		ok = assert.Empty(t, fr.Error, "fault %s", fr.Name) && ok
	}
	ok = assert.Empty(t, rep.Problems) && ok
	if !ok {
		t.Logf("what happened: bench/out's report lists each problem; the processes' logs are in %s "+
			"(one file per process, every start marked ====). Last lines:\n%s", f.dir, f.tails())
	}
}
