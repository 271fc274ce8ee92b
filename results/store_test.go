package results_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
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
	r := job.Result{ID: id, ExitCode: &code, Stdout: job.Output{Text: "hi\n", Bytes: 3}, Worker: "w1"}
	r.Finish(job.ReasonOK)
	return r
}

func TestRecordFirstWriterWins(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	for round := range 20 {
		id := "race-" + string(rune('a'+round))
		contenders := []job.Reason{job.ReasonOK, job.ReasonExitNonzero, job.ReasonCanceled, job.ReasonInfra}
		stored := make([]job.Result, len(contenders))
		first := make([]bool, len(contenders))
		var wg sync.WaitGroup
		for i, reason := range contenders {
			wg.Go(func() {
				r := job.Result{ID: id, Error: "by contender " + string(reason)}
				r.Finish(reason)
				var err error
				stored[i], first[i], err = s.store.Record(ctx, r)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		winners := 0
		for i := range contenders {
			if first[i] {
				winners++
			}
			assert.Equal(t, stored[0], stored[i], "every caller gets the one stored result")
		}
		require.Equal(t, 1, winners, "exactly one Record call is first")
		got, err := s.store.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, stored[0], got)
		pub, err := s.client.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, stored[0], pub, "the published result is the stored one")
	}
}

func TestRecordCompletesResult(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	r := job.Result{ID: "complete-1", Reason: job.ReasonTimeout}
	stored, first, err := s.store.Record(context.Background(), r)
	require.NoError(t, err)
	assert.True(t, first)
	assert.Equal(t, job.Version, stored.V)
	assert.Equal(t, job.StateFailed, stored.State)
	assert.False(t, stored.FinishedAt.IsZero())
}

func TestRecordRejectsInvalid(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for name, r := range map[string]job.Result{
		"empty id":         {Reason: job.ReasonOK},
		"id with space":    {ID: "a b", Reason: job.ReasonOK},
		"id too long":      {ID: strings.Repeat("x", 129), Reason: job.ReasonOK},
		"no reason":        {ID: "x1"},
		"unknown reason":   {ID: "x1", Reason: "exploded"},
		"state not reason": {ID: "x1", Reason: job.ReasonOK, State: job.StateFailed},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := s.store.Record(context.Background(), r)
			require.ErrorIs(t, err, results.ErrInvalid)
		})
	}
	_, err := s.store.Get(context.Background(), "x1")
	require.ErrorIs(t, err, results.ErrNotFound, "nothing was stored")
}

// A crash between the Redis write and the publish leaves a stored result
// nobody can read through NATS; the next Record (whoever calls it) repairs it.
func TestRecordRepairsLostPublish(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	orig := okResult("lost-1")
	orig.FinishedAt = time.Now().UTC().Truncate(time.Millisecond)
	data, err := json.Marshal(orig)
	require.NoError(t, err)
	require.NoError(t, s.rdb.Set(ctx, s.prefix+"result:lost-1", data, time.Hour).Err())

	_, err = s.client.Get(ctx, "lost-1")
	require.ErrorIs(t, err, client.ErrNotFinished)

	late := job.Result{ID: "lost-1"}
	late.Finish(job.ReasonInfra)
	stored, first, err := s.store.Record(ctx, late)
	require.NoError(t, err)
	assert.False(t, first)
	assert.Equal(t, orig, stored, "the earlier result stays authoritative")

	got, err := s.client.Get(ctx, "lost-1")
	require.NoError(t, err)
	assert.Equal(t, orig, got)
}

// With NATS down the result is stored and the error says it was not
// published; calling Record again once NATS is back publishes it.
func TestRecordDuringNATSOutage(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	s.nats.Stop()
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	stored, first, err := s.store.Record(rctx, okResult("outage-1"))
	cancel()
	require.ErrorIs(t, err, results.ErrNotPublished)
	assert.True(t, first)
	assert.Equal(t, "outage-1", stored.ID)

	s.nats.Restart()
	require.Eventually(t, s.nc.IsConnected, 10*time.Second, 10*time.Millisecond)
	again, first, err := s.store.Record(ctx, okResult("outage-1"))
	require.NoError(t, err)
	assert.False(t, first)
	assert.Equal(t, stored, again)
	got, err := s.client.Get(ctx, "outage-1")
	require.NoError(t, err)
	assert.Equal(t, stored, got)
}

func TestRecordLargeResultIsTrimmedOnNATSOnly(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	big := okResult("big-1")
	big.Stdout = job.Output{Text: strings.Repeat("é", 1<<20), Bytes: 2 << 20} // 2 MiB > max_payload (1 MiB)
	big.Stderr = job.Output{Text: "E" + strings.Repeat("x", 300<<10) + "Z", Bytes: 300<<10 + 2}
	stored, _, err := s.store.Record(ctx, big)
	require.NoError(t, err)

	full, err := s.store.Get(ctx, "big-1")
	require.NoError(t, err)
	assert.Equal(t, stored, full)
	assert.Equal(t, big.Stdout.Text, full.Stdout.Text, "Redis keeps the whole result")

	st, err := s.js.Stream(ctx, job.StreamResults)
	require.NoError(t, err)
	raw, err := st.GetLastMsgForSubject(ctx, job.ResultSubject("big-1"))
	require.NoError(t, err)
	assert.Equal(t, "1", raw.Header.Get(results.HeaderTrimmed))
	assert.Less(t, len(raw.Data), int(s.nc.MaxPayload()))

	pub, err := s.client.Get(ctx, "big-1")
	require.NoError(t, err)
	assert.True(t, pub.Stdout.Truncated)
	assert.Positive(t, pub.Stdout.OmittedBytes)
	assert.True(t, strings.HasPrefix(big.Stdout.Text, pub.Stdout.Text))
	assert.True(t, strings.HasSuffix(big.Stdout.Text, pub.Stdout.Tail))
	assert.True(t, strings.HasPrefix(pub.Stderr.String(), "E"))
	assert.True(t, strings.HasSuffix(pub.Stderr.String(), "Z"))
	assert.Equal(t, stored.Reason, pub.Reason)
}

func TestGetNotFound(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	_, err := s.store.Get(context.Background(), "nope")
	require.ErrorIs(t, err, results.ErrNotFound)
}

func TestBeginRunCounts(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	for want := 1; want <= 3; want++ {
		n, err := s.store.BeginRun(ctx, "runs-1")
		require.NoError(t, err)
		assert.Equal(t, want, n)
	}
	ttl, err := s.rdb.PTTL(ctx, s.prefix+"runs:runs-1").Result()
	require.NoError(t, err)
	assert.Positive(t, ttl, "the counter expires")
	n, err := s.store.BeginRun(ctx, "runs-2")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	sub, err := s.nc.SubscribeSync(job.CancelSubject("c-1"))
	require.NoError(t, err)
	require.NoError(t, s.nc.Flush())

	canceled, err := s.store.Canceled(ctx, "c-1")
	require.NoError(t, err)
	assert.False(t, canceled)
	require.NoError(t, s.store.Cancel(ctx, "c-1"))
	canceled, err = s.store.Canceled(ctx, "c-1")
	require.NoError(t, err)
	assert.True(t, canceled)
	_, err = sub.NextMsg(10 * time.Second)
	require.NoError(t, err, "a cancel notification is published")
	ttl, err := s.rdb.PTTL(ctx, s.prefix+"cancel:c-1").Result()
	require.NoError(t, err)
	assert.Positive(t, ttl)
}

func TestClaim(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	holder, ok, err := s.store.Claim(ctx, "cl-1", "owner-a")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "owner-a", holder)
	holder, ok, err = s.store.Claim(ctx, "cl-1", "owner-a")
	require.NoError(t, err)
	assert.True(t, ok, "the holder keeps its claim")
	assert.Equal(t, "owner-a", holder)
	holder, ok, err = s.store.Claim(ctx, "cl-1", "owner-b")
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, "owner-a", holder)
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
