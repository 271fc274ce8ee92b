package failwatch_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/failwatch"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/telemetry"
)

// metrics is a telemetry provider with Paddock's instruments, and its
// scrape.
func metrics(t *testing.T) (*telemetry.Metrics, func() string) {
	t.Helper()
	p, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "failwatch-test", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	m, err := telemetry.NewMetrics(p.MeterProvider().Meter("test"))
	require.NoError(t, err)
	srv := httptest.NewServer(p.MetricsHandler())
	t.Cleanup(srv.Close)
	return m, func() string {
		resp, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
}

// failovers is the value of paddock_failovers_seen_total for service.
func failovers(body, service string) string {
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, "paddock_failovers_seen_total{") && strings.Contains(line, `paddock_failover_service="`+service+`"`) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return "0"
}

// A real promotion: a primary, its replica and three Sentinels; the
// primary is killed and the Sentinels promote the replica. The watcher's
// client follows the master (as a Sentinel client does) and counts one
// failover, and the fleet's Redis keeps both masters' replication ids.
func TestWatcherSeesARedisPromotion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ha := testsvc.StartRedisHA(t, testsvc.RedisHAConfig{})
	primary, killPrimary := ha.Nodes[0].Addr(), ha.Nodes[0].Kill
	replica := ha.Nodes[1].Addr()
	var target atomic.Value
	target.Store(primary)
	rdb := redis.NewClient(&redis.Options{Addr: "master", MaxRetries: -1, Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, target.Load().(string))
	}})
	t.Cleanup(func() { rdb.Close() })
	m, scrape := metrics(t)
	w := failwatch.New(rdb, failwatch.Config{Metrics: m})

	w.Look(ctx)
	first, err := rdb.ZRange(ctx, "paddock:"+failwatch.MastersKey, 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, first, 1, "the primary's replication id")
	rep := redis.NewClient(&redis.Options{Addr: replica})
	t.Cleanup(func() { rep.Close() })
	testsvc.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		return rep.ZCard(ctx, "paddock:"+failwatch.MastersKey).Val() == 1
	}, "the replica has the primary's writes")
	w.Look(ctx)
	assert.Equal(t, "0", failovers(scrape(), "redis"), "the same master is no failover")

	killPrimary()
	require.Equal(t, replica, ha.WaitMaster(primary, 30*time.Second), "the Sentinels promote the replica")
	target.Store(replica)
	w.Look(ctx)
	assert.Equal(t, "1", failovers(scrape(), "redis"), "the promotion is one failover seen")
	masters, err := rep.ZRange(ctx, "paddock:"+failwatch.MastersKey, 0, -1).Result()
	require.NoError(t, err)
	assert.Len(t, masters, 2, "the fleet knew two masters")
	assert.Equal(t, first[0], masters[0], "the first master first")
	w.Look(ctx)
	assert.Equal(t, "1", failovers(scrape(), "redis"), "and only once")
}

// A stream's leader steps down on a 3-node cluster: two watchers (two
// schedulers) each count the change they saw, and the fleet's Redis counts
// it once.
func TestWatcherSeesAStreamLeaderChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := testsvc.StartNATSClusterWith(t, 3, testsvc.NATSClusterConfig{Accounts: true})
	nc, err := nats.Connect(cl.AppURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "PADDOCK_JOBS_dev", Subjects: []string{"t.dev"}, Replicas: 3})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"t.other"}, Replicas: 3})
	require.NoError(t, err)
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	m1, scrape1 := metrics(t)
	m2, scrape2 := metrics(t)
	w1 := failwatch.New(rdb, failwatch.Config{JetStream: js, Metrics: m1})
	w2 := failwatch.New(rdb, failwatch.Config{JetStream: js, Metrics: m2})

	leader := func() string {
		st, err := js.Stream(ctx, "PADDOCK_JOBS_dev")
		require.NoError(t, err)
		return st.CachedInfo().Cluster.Leader
	}
	var was string
	testsvc.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { was = leader(); return was != "" }, "the stream has a leader")
	w1.Look(ctx)
	w2.Look(ctx)
	assert.Equal(t, was, rdb.HGet(ctx, "paddock:"+failwatch.LeadersKey, "PADDOCK_JOBS_dev").Val())
	assert.False(t, rdb.HExists(ctx, "paddock:"+failwatch.LeadersKey, "OTHER").Val(), "only Paddock's streams")

	_, err = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.PADDOCK_JOBS_dev", nil, 5*time.Second)
	require.NoError(t, err)
	testsvc.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { l := leader(); return l != "" && l != was },
		"another server leads the stream")
	w1.Look(ctx)
	w2.Look(ctx)
	assert.Equal(t, "1", failovers(scrape1(), "nats"))
	assert.Equal(t, "1", failovers(scrape2(), "nats"))
	changes := rdb.HGetAll(ctx, "paddock:"+failwatch.LeaderChangesKey).Val()
	assert.Equal(t, "1", changes["PADDOCK_JOBS_dev"], "two watchers, one change counted")
	assert.Equal(t, "1", changes["*"])
	assert.NotEmpty(t, changes["*at"])
}

// The watcher is a restartable service.
func TestWatcherStartStop(t *testing.T) {
	t.Parallel()
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	w := failwatch.New(rdb, failwatch.Config{Interval: 10 * time.Millisecond, KeyPrefix: "x:"})
	for range 3 {
		require.NoError(t, w.Start(context.Background()))
		require.NoError(t, w.Start(context.Background()))
		testsvc.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
			return rdb.ZCard(context.Background(), "x:"+failwatch.MastersKey).Val() == 1
		}, "a look notes the master")
		w.Stop()
		w.Stop()
	}
}
