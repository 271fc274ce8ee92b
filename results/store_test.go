package results_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the outage tests cause many.
	redis.SetLogger(discardLogger{})
	goleak.VerifyTestMain(m)
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// setup is one test's services: its own NATS server (streams ensured), its
// own redis-server, a Store and a client reading results.
type setup struct {
	nats   *testsvc.NATS
	nc     *nats.Conn
	js     jetstream.JetStream
	redis  *testsvc.Redis
	rdb    *redis.Client
	prefix string
	store  *results.Store
	client *client.Client
}

func newSetup(t testing.TB) *setup {
	t.Helper()
	s := &setup{nats: testsvc.StartNATS(t), redis: testsvc.StartRedis(t), prefix: testsvc.Unique("t") + ":"}
	var err error
	s.nc, err = nats.Connect(s.nats.URL, nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(s.nc.Close)
	s.js, err = jetstream.New(s.nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(context.Background(), s.js, results.StreamConfig{}))
	// The index tests record results of tenant dev too.
	require.NoError(t, results.EnsureTenantStream(context.Background(), s.js, results.StreamConfig{}, "dev", 0))
	s.rdb = s.redis.Client()
	t.Cleanup(func() { s.rdb.Close() })
	s.store = results.NewStore(s.rdb, s.js, results.StoreConfig{KeyPrefix: s.prefix})
	s.client, err = client.New(s.nc, client.Config{})
	require.NoError(t, err)
	t.Cleanup(s.client.Close)
	return s
}

func okResult(id string) job.Result {
	code := 0
	r := job.Result{ID: id, Tenant: job.DefaultTenant, ExitCode: &code, Stdout: job.Output{Text: "hi\n", Bytes: 3}, Worker: "w1"}
	r.Finish(job.ReasonOK)
	return r
}

func TestRedisDownIsAnError(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.redis.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _, err := s.store.Record(ctx, okResult("down-1"))
	require.Error(t, err)
	assert.False(t, errors.Is(err, results.ErrNotPublished), "nothing was stored")
	_, err = s.store.Get(ctx, "down-1")
	require.Error(t, err)
	assert.False(t, errors.Is(err, results.ErrNotFound), "an outage is not 'not found'")
	_, _, err = s.store.Claim(ctx, "down-1", "o")
	require.Error(t, err)
}
