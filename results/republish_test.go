package results_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/results"
)

// TestRepublisherPublishesWhatADeadProcessCouldNot: a worker records a
// result while NATS is down and dies before NATS is back (its buffered
// publish dies with it). The republisher of another process publishes the
// stored result once NATS answers again.
func TestRepublisherPublishesWhatADeadProcessCouldNot(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	nc, err := nats.Connect(s.nats.URL, nats.MaxReconnects(-1))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	dying := results.NewStore(s.rdb, js, results.StoreConfig{KeyPrefix: s.prefix})

	s.nats.Stop()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err = dying.Record(rctx, okResult("orphan-1"))
	cancel()
	require.ErrorIs(t, err, results.ErrNotPublished)
	nc.Close() // the worker dies; its reconnect buffer is gone
	s.nats.Restart()

	rp := results.NewRepublisher(s.store, 50*time.Millisecond)
	for range 3 {
		require.NoError(t, rp.Start(ctx))
		require.NoError(t, rp.Start(ctx))
		rp.Stop()
	}
	require.NoError(t, rp.Start(ctx))
	defer rp.Stop()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	got, err := s.client.Wait(wctx, "orphan-1")
	require.NoError(t, err)
	assert.Equal(t, "hi\n", got.Stdout.Text)
	require.Eventually(t, func() bool {
		n, err := s.rdb.ZCard(ctx, s.prefix+"unpublished").Result()
		return err == nil && n == 0
	}, 10*time.Second, 20*time.Millisecond, "the id is forgotten once published")
}
