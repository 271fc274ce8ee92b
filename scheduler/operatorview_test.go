package scheduler_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/failwatch"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

// The operator's view of a fleet on real services: two workers beating on
// this host (one with its facts, one stopped), a Redis primary with a
// replica and three Sentinels (one asked), a 3-node NATS cluster (system account pinged)
// with an R3 jobs stream. It names the host, sums its workers, gives
// Redis's role and replica, the Sentinel's master, every NATS server, the
// meta leader and the stream's leader and followers; then the failovers
// and rescues the fleet noted.
func TestOperatorViewReadsTheFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ha := testsvc.StartRedisHA(t, testsvc.RedisHAConfig{})
	primary, sentinel := ha.Nodes[0].Addr(), ha.Sentinels[0].Addr()
	rdb := ha.NodeClient(ha.Nodes[0])
	t.Cleanup(func() { rdb.Close() })
	cl := testsvc.StartNATSClusterWith(t, 3, testsvc.NATSClusterConfig{Accounts: true})
	app, err := nats.Connect(cl.AppURL)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	sys, err := nats.Connect(cl.SysURL)
	require.NoError(t, err)
	t.Cleanup(sys.Close)
	js, err := jetstream.New(app)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "PADDOCK_JOBS_dev", Subjects: []string{"paddock.jobs.submit.dev"}, Replicas: 3})
	require.NoError(t, err)

	live := worker.NewHeartbeat(rdb, "w-live", "paddock:", 30*time.Second)
	live.Status = func(b *job.WorkerBeat) { b.Concurrency, b.Running, b.Pool = 4, 1, 2 }
	require.NoError(t, live.Start(ctx))
	t.Cleanup(live.Stop)
	gone := worker.NewHeartbeat(rdb, "w-gone", "paddock:", 30*time.Second)
	gone.Status = func(b *job.WorkerBeat) { b.Concurrency = 8 }
	require.NoError(t, gone.Start(ctx))
	gone.Stop() // known, not alive

	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	t.Cleanup(func() { sc.Close() })
	v, err := scheduler.NewOperatorView(rdb, scheduler.OperatorViewConfig{JetStream: js, Servers: scheduler.NATSServers{Conn: sys},
		Sentinels: []scheduler.Sentinel{{Addr: sentinel, Client: sc}}, MasterName: ha.Master})
	require.NoError(t, err)
	var f scheduler.OperatorFleet
	testsvc.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		f, err = v.Read(ctx)
		require.NoError(t, err)
		return f.Redis.ConnectedReplicas == 1 && strings.Contains(f.Redis.Replicas[0], "state=online") && len(f.NATS.Streams) == 1 && f.NATS.Streams[0].Leader != "" &&
			len(f.NATS.Streams[0].Replicas) == 2 && f.NATS.Streams[0].Replicas[0].Current && f.NATS.Streams[0].Replicas[1].Current
	}, "the replica is in sync and the stream's followers are current")

	host, _ := os.Hostname()
	require.Len(t, f.Hosts, 1)
	assert.Equal(t, scheduler.FleetHost{Host: host, Workers: 2, WorkersAlive: 1, Concurrency: 4, Running: 1, Pool: 2,
		HeartbeatAgeMS: f.Hosts[0].HeartbeatAgeMS}, f.Hosts[0], "a dead worker is counted, not its slots")
	require.Len(t, f.Workers, 2)
	assert.Equal(t, "w-gone", f.Workers[0].ID)
	assert.False(t, f.Workers[0].Alive)
	w := f.Workers[1]
	assert.True(t, w.Alive)
	assert.Equal(t, job.WorkerBeat{ID: "w-live", Host: host, PID: os.Getpid(), Concurrency: 4, Running: 1, Pool: 2,
		StartedAt: w.StartedAt, BeatAt: w.BeatAt}, w.WorkerBeat)
	assert.Less(t, w.HeartbeatAgeMS, int64(time.Hour/time.Millisecond))

	assert.True(t, f.Redis.OK)
	assert.Equal(t, "master", f.Redis.Role)
	require.Len(t, f.Redis.Replicas, 1)
	assert.Contains(t, f.Redis.Replicas[0], "state=online")
	assert.Equal(t, []scheduler.SentinelHealth{{Addr: sentinel, Master: primary}}, f.Redis.Sentinels)

	assert.True(t, f.NATS.OK, f.NATS.Error)
	names := []string{}
	for _, s := range f.NATS.Servers {
		names = append(names, s.Name)
		assert.Equal(t, cl.Name, s.Cluster)
		assert.GreaterOrEqual(t, s.Routes, 2, "routed to the two others (pooled routes: a few each)")
	}
	assert.Equal(t, []string{cl.Name + "-1", cl.Name + "-2", cl.Name + "-3"}, names)
	assert.Contains(t, names, f.NATS.MetaLeader)
	st, err := js.Stream(ctx, "PADDOCK_JOBS_dev")
	require.NoError(t, err)
	assert.Equal(t, st.CachedInfo().Cluster.Leader, f.NATS.Streams[0].Leader)
	assert.Contains(t, names, f.NATS.Streams[0].Leader)
	for _, r := range f.NATS.Streams[0].Replicas {
		assert.NotEqual(t, f.NATS.Streams[0].Leader, r.Name, "the followers, not the leader")
		assert.True(t, slices.Contains(names, r.Name))
	}
	assert.Equal(t, scheduler.FleetFailovers{}, f.Failovers)
	assert.Zero(t, f.Rescued)

	// What the fleet noted: a master (failwatch), a leader change, a rescue.
	fw := failwatch.New(rdb, failwatch.Config{JetStream: js, Logger: quiet()})
	fw.Look(ctx)
	_, err = app.Request("$JS.API.STREAM.LEADER.STEPDOWN.PADDOCK_JOBS_dev", nil, 5*time.Second)
	require.NoError(t, err)
	testsvc.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		fw.Look(ctx)
		f, err = v.Read(ctx)
		require.NoError(t, err)
		return f.Failovers.StreamLeaderChanges == 1
	}, "the watcher notes the new leader")
	assert.False(t, f.Failovers.StreamLastChange.IsZero())
	assert.Zero(t, f.Failovers.RedisMasterChanges, "one master known: no change")
	require.NoError(t, failwatch.NoteRescue(ctx, rdb, ""))
	f, err = v.Read(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), f.Rescued)
}

// Without NATS the view says so, and Redis's part still reads; a dead
// Redis is an error (the workers cannot be listed) with Redis's health
// saying why.
func TestOperatorViewPartsMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := testsvc.StartRedis(t)
	opt := r.Options()
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	v, err := scheduler.NewOperatorView(rdb, scheduler.OperatorViewConfig{})
	require.NoError(t, err)
	f, err := v.Read(ctx)
	require.NoError(t, err)
	assert.True(t, f.Redis.OK)
	assert.False(t, f.NATS.OK)
	assert.Equal(t, "no NATS connection given", f.NATS.Error)
	assert.Empty(t, f.Hosts)

	_, _, err = scheduler.NATSServers{Conn: nil}.Servers(ctx)
	assert.Error(t, err)
	r.Stop()
	f, err = v.Read(ctx)
	assert.Error(t, err)
	assert.False(t, f.Redis.OK)
	assert.NotEmpty(t, f.Redis.Error)
	_, err = scheduler.NewOperatorView(nil, scheduler.OperatorViewConfig{})
	assert.ErrorIs(t, err, scheduler.ErrConfig)
}
