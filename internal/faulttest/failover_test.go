package faulttest

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/redisurl"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// newHAFleet is a fleet whose processes reach Redis through Sentinels
// (redisURL, a redis+sentinel:// URL) and NATS at natsURL (a server or a
// cluster's URL list), with streams made at replicas. The test's own
// clients are the same kinds the processes use: the failover client, and
// a NATS connection that reconnects forever.
func newHAFleet(t *testing.T, redisURL, natsURL string, replicas int) *fleet {
	t.Helper()
	d := testsvc.Docker(t)
	testsvc.RequireImage(t, d, testsvc.TestImage)
	u, err := redisurl.Parse("--redis-url", redisURL)
	require.NoError(t, err)
	u.SetTimeouts(2*time.Second, 2*time.Second, 2*time.Second)
	rdb := u.NewClient()
	t.Cleanup(func() { rdb.Close() })
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{Replicas: replicas}))
	c, err := pclient.New(nc, pclient.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	f := &fleet{
		t: t, name: testsvc.Unique("ha"), dir: t.TempDir(), docker: d, rdb: rdb, nc: nc,
		client: c, store: results.NewStore(rdb, js, results.StoreConfig{}), insp: asynq.NewInspectorFromRedisClient(rdb),
		redisURL: redisURL, natsURL: natsURL,
	}
	t.Cleanup(f.teardown) // runs before the services' cleanups
	return f
}

// checkOneResult checks, from Redis and the results stream, that every id
// has exactly one terminal result: the one in Redis (SET NX, first writer
// wins) is the one NATS delivered. It returns how many ran more than once
// and the longest gap between two completions at or after since (the
// time a fault cost).
func (f *fleet) checkOneResult(ids []string, since time.Time, timeout time.Duration) (reruns int, gap time.Duration) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rs, err := f.client.WaitAll(ctx, ids, nil)
	require.NoError(f.t, err)
	require.Len(f.t, rs, len(ids))
	var ends []time.Time
	for i, r := range rs {
		ends = append(ends, r.FinishedAt)
		assert.Equal(f.t, ids[i], r.ID)
		assert.Equal(f.t, job.StateSucceeded, r.State, "%s: %s %s", r.ID, r.Reason, r.Error)
		stored, err := f.store.Get(ctx, job.Key("", r.ID))
		if assert.NoError(f.t, err, "%s: the result delivered on NATS is not in Redis", r.ID) {
			assert.Equal(f.t, r.FinishedAt, stored.FinishedAt, "%s: two terminal results", r.ID)
			assert.Equal(f.t, r.Worker, stored.Worker, "%s: two terminal results", r.ID)
		}
		if r.Runs > 1 {
			reruns++
		}
	}
	last := time.Now()
	f.waitFor(2*time.Minute, "an empty queue (nothing stuck active)", func() bool {
		q, err := f.insp.GetQueueInfo(job.DefaultQueue)
		ok := err == nil && q.Active == 0 && q.Pending == 0 && q.Retry == 0 && q.Scheduled == 0
		if !ok && time.Since(last) > 20*time.Second {
			last = time.Now()
			if err == nil {
				f.t.Logf("queue: active %d pending %d retry %d scheduled %d archived %d", q.Active, q.Pending, q.Retry, q.Scheduled, q.Archived)
				for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){f.insp.ListActiveTasks, f.insp.ListPendingTasks, f.insp.ListRetryTasks} {
					tasks, _ := list(job.DefaultQueue)
					for _, ti := range tasks {
						f.t.Logf("task %s state %v retried %d last error %q", ti.ID, ti.State, ti.Retried, ti.LastErr)
					}
				}
			}
		}
		return ok
	})
	slices.SortFunc(ends, time.Time.Compare)
	prev := since
	for _, e := range ends {
		if e.After(prev) {
			gap = max(gap, e.Sub(prev))
			prev = e
		}
	}
	return reruns, gap
}

// TestRedisSentinelFailoverMidBatch: a scheduler and two workers on a
// Redis behind three Sentinels (Paddock's ACL user on); while a batch
// runs the primary is SIGKILLed and Sentinel promotes the replica. Every
// process follows the failover without a restart (one failover client
// per process), and every job ends with exactly one terminal result,
// none lost. Leases and Lua scripts keep working on the new primary (the
// jobs' BeginRunAs, results and index writes are scripts it never saw).
func TestRedisSentinelFailoverMidBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of Sentinel failover; run without -short")
	}
	t.Parallel()
	ha := testsvc.StartRedisHA(t, testsvc.RedisHAConfig{Auth: true})
	ns := testsvc.StartNATS(t)
	f := newHAFleet(t, ha.URL(), ns.URL, 0)
	f.scheduler("sched")
	w1, w2 := f.worker("w1"), f.worker("w2")

	const n = 40
	batch := specs("fo", n, "sleep 0.5; echo %d")
	ids := f.submitAll(batch, time.Minute)
	f.waitFor(2*time.Minute, "a quarter of the batch done", func() bool {
		return f.finished(ids) >= n/4
	})
	ctx := context.Background()
	old := ha.Primary(ctx)
	done := f.finished(ids)
	t0 := time.Now()
	old.Kill()
	promoted := ha.WaitMaster(old.Addr(), 30*time.Second)
	t.Logf("primary %s killed with %d/%d jobs done; Sentinel promoted %s after %s", old.Addr(), done, n, promoted, time.Since(t0).Round(100*time.Millisecond))
	// More submissions after the failover, through the scheduler's
	// failover client.
	ids = append(ids, f.submitAll(specs("fo-after", 8, "echo after %d"), time.Minute)...)

	reruns, gap := f.checkOneResult(ids, t0, 3*time.Minute)
	t.Logf("%d jobs, each one result; %d ran again after an infrastructure fault; longest gap between completions from the kill on: %s; all done %s after the kill",
		len(ids), reruns, gap.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
	assert.False(t, w1.exited() || w2.exited(), "the workers rode the failover out")
	f.logTailsIf(gap > 15*time.Second, "a long gap")

	// The old primary comes back as a replica; the fleet goes on.
	ha.Restart(old)
	ids2 := f.submitAll(specs("fo-back", 4, "echo back %d"), time.Minute)
	f.checkOneResult(ids2, time.Now(), time.Minute)
}

// logTailsIf logs the last lines of every process when cond holds (a
// passing test whose numbers want explaining).
func (f *fleet) logTailsIf(cond bool, why string) {
	if !cond {
		return
	}
	f.mu.Lock()
	procs := f.procs
	f.mu.Unlock()
	for _, p := range procs {
		f.t.Logf("---- %s (%s) last lines:\n%s", p.name, why, p.tail(60))
	}
}

// finished counts the ids with a stored result.
func (f *fleet) finished(ids []string) int {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = job.Key("", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := f.store.Finished(ctx, keys)
	if err != nil {
		return 0
	}
	c := 0
	for _, ok := range m {
		if ok {
			c++
		}
	}
	return c
}

// TestNATSClusterLeaderLossMidBatch: a scheduler and two workers with
// --replicas 3 on a 3-node JetStream cluster. Every stream and bucket the
// fleet makes is R3 (read from StreamInfo); while a batch runs, the server
// leading the jobs stream is shut down. The stream elects another leader,
// the processes reconnect to the other servers, and every job ends with
// exactly one terminal result.
func TestNATSClusterLeaderLossMidBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of NATS cluster failover; run without -short")
	}
	t.Parallel()
	c := testsvc.StartNATSCluster(t, 3)
	rs := testsvc.StartRedis(t)
	f := newHAFleet(t, "unix://"+rs.Addr, c.URL(), 3)
	f.scheduler("sched", "--replicas", "3")
	f.worker("w1", "--replicas", "3")
	f.worker("w2", "--replicas", "3")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	js, err := jetstream.New(f.nc)
	require.NoError(t, err)
	tn := job.DefaultTenant
	for _, name := range []string{job.JobsStream(tn), job.ResultsStream(tn), job.OutputStream(tn),
		"OBJ_" + job.OutBucket(tn), "OBJ_" + job.InBucket(tn), "KV_PADDOCK_TENANTS", "KV_paddock_tokens"} {
		st, err := js.Stream(ctx, name)
		require.NoError(t, err, name)
		assert.Equal(t, 3, st.CachedInfo().Config.Replicas, "%s at R3", name)
	}

	const n = 40
	ids := f.submitAll(specs("nc", n, "sleep 0.5; echo %d"), time.Minute)
	f.waitFor(2*time.Minute, "a quarter of the batch done", func() bool { return f.finished(ids) >= n/4 })
	st, err := js.Stream(ctx, job.JobsStream(tn))
	require.NoError(t, err)
	leader := c.Index(st.CachedInfo().Cluster.Leader)
	require.GreaterOrEqual(t, leader, 0, "the jobs stream's leader %q is a server of the cluster", st.CachedInfo().Cluster.Leader)
	t0 := time.Now()
	c.Shutdown(leader)
	t.Logf("shut down %s, leader of %s, with %d/%d jobs done", c.ServerName(leader), job.JobsStream(tn), f.finished(ids), n)
	ids = append(ids, f.submitAll(specs("nc-after", 8, "echo after %d"), time.Minute)...)

	reruns, gap := f.checkOneResult(ids, t0, 3*time.Minute)
	t.Logf("%d jobs, each one result; %d ran again; longest gap between completions from the shutdown on: %s; all done %s after it",
		len(ids), reruns, gap.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
	f.logTailsIf(gap > 15*time.Second, "a long gap")
	st, err = js.Stream(ctx, job.JobsStream(tn))
	require.NoError(t, err)
	assert.NotEqual(t, c.ServerName(leader), st.CachedInfo().Cluster.Leader, "another server leads the stream")

	c.Restart(leader) // the node rejoins; the fleet goes on
	ids2 := f.submitAll(specs("nc-back", 4, "echo back %d"), time.Minute)
	f.checkOneResult(ids2, time.Now(), time.Minute)
}

// TestRedisFailoverLostTaskComesBack: a write the replica never got. The
// replica is frozen (SIGSTOP) until the primary drops it; jobs submitted
// then are enqueued on the primary alone; the primary is killed and the
// frozen replica, resumed, is promoted without their tasks. The
// scheduler still holds their submissions: its hold check finds the
// tasks gone and hands the submissions back, they are scheduled again,
// and a worker started after the failover runs each once.
func TestRedisFailoverLostTaskComesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of Sentinel failover; run without -short")
	}
	t.Parallel()
	ha := testsvc.StartRedisHA(t, testsvc.RedisHAConfig{Auth: true})
	ns := testsvc.StartNATS(t)
	f := newHAFleet(t, ha.URL(), ns.URL, 0)
	// --slots 0: no workers yet, and every job must reach the queue.
	f.scheduler("sched", "--slots", "0")
	ctx := context.Background()
	primary, replica := ha.Primary(ctx), ha.Nodes[1]
	pc := ha.NodeClient(primary)
	defer pc.Close()
	require.NoError(t, pc.ConfigSet(ctx, "repl-timeout", "2").Err())

	replica.Signal(syscall.SIGSTOP)
	f.waitFor(30*time.Second, "the primary dropping its frozen replica", func() bool {
		info, err := pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	})
	const n = 6
	ids := f.submitAll(specs("lost", n, "echo lost %d"), time.Minute)
	f.waitFor(30*time.Second, "the tasks on the primary alone", func() bool {
		for _, id := range ids {
			if c, err := pc.Exists(ctx, "asynq:{default}:t:"+job.Key("", id)).Result(); err != nil || c == 0 {
				return false
			}
		}
		return true
	})
	primary.Kill()
	replica.Signal(syscall.SIGCONT)
	promoted := ha.WaitMaster(primary.Addr(), time.Minute)
	require.Equal(t, replica.Addr(), promoted)
	rc := ha.NodeClient(replica)
	defer rc.Close()
	for _, id := range ids {
		c, err := rc.Exists(ctx, "asynq:{default}:t:"+job.Key("", id)).Result()
		require.NoError(t, err)
		require.Zero(t, c, "%s: the promoted replica has the task: nothing was lost, the test proves nothing", id)
	}

	t0 := time.Now()
	f.worker("w1")
	reruns, _ := f.checkOneResult(ids, t0, 2*time.Minute)
	assert.Zero(t, reruns, "each lost job ran once, after the failover")
	t.Logf("%d tasks lost in the failover; all scheduled again and done %s after a worker started", n, time.Since(t0).Round(100*time.Millisecond))
}
