package locks_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/locks"
)

func TestNewLeaserConfig(t *testing.T) {
	t.Parallel()
	_, err := locks.NewLeaser(nil, locks.LeaseConfig{})
	require.ErrorIs(t, err, locks.ErrInvalid)
	assert.False(t, locks.Retryable(err))

	s := newSetup(t)
	_, err = locks.NewLeaser(s.rdb, locks.LeaseConfig{PollMin: time.Second, PollMax: time.Millisecond})
	require.ErrorIs(t, err, locks.ErrInvalid)
	_, err = locks.NewLeaser(s.rdb, locks.LeaseConfig{OpTimeout: -time.Second})
	require.ErrorIs(t, err, locks.ErrInvalid)

	ctx := context.Background()
	_, err = s.leaser.Obtain(ctx, "", time.Second, 0)
	require.ErrorIs(t, err, locks.ErrInvalid)
	_, err = s.leaser.Obtain(ctx, "r", locks.MinTTL-1, 0)
	require.ErrorIs(t, err, locks.ErrInvalid)
}

func TestObtainExclusiveWithIncreasingTokens(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()

	l1, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
	require.NoError(t, err)
	assert.Equal(t, "r", l1.Resource())
	assert.Equal(t, 10*time.Second, l1.TTL())
	assert.Positive(t, l1.Token())
	owner := s.leaseOwner(t, "r")
	assert.Len(t, owner, 32, "a 128-bit owner token, hex")

	_, err = s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
	require.ErrorIs(t, err, locks.ErrNotObtained)
	var te *locks.TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "lease", te.Lock)
	assert.Equal(t, "r", te.Name)

	_, err = s.leaser.Obtain(ctx, "r", 10*time.Second, 50*time.Millisecond)
	require.ErrorAs(t, err, &te)
	assert.GreaterOrEqual(t, te.Waited, 50*time.Millisecond)

	other, err := s.leaser.Obtain(ctx, "other", 10*time.Second, 0)
	require.NoError(t, err, "resources are independent")
	require.NoError(t, other.Release(ctx))

	require.NoError(t, l1.Release(ctx))
	require.NoError(t, l1.Release(ctx), "Release is idempotent")
	assert.Empty(t, s.leaseOwner(t, "r"))

	prev := l1.Token()
	for range 10 {
		l, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
		require.NoError(t, err)
		assert.Greater(t, l.Token(), prev, "fencing tokens strictly increase")
		prev = l.Token()
		require.NoError(t, l.Release(ctx))
	}
	assert.Nil(t, l1.Err())
	assert.False(t, closed(l1.Lost()), "Release does not close Lost")
}

func TestObtainWaitsForRelease(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	l1, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
	require.NoError(t, err)

	// The release waits until the second Obtain was refused once: it
	// really waits for the release, and then gets the lease.
	rdb := newSignalClient(s.rdb)
	var wg sync.WaitGroup
	wg.Go(func() {
		<-rdb.refused
		assert.NoError(t, l1.Release(ctx))
	})
	l2, err := s.newLeaser(t, rdb).Obtain(ctx, "r", 10*time.Second, time.Minute)
	require.NoError(t, err)
	wg.Wait()
	assert.Greater(t, l2.Token(), l1.Token())
	require.NoError(t, l2.Release(ctx))
}

// A holder that vanished without releasing blocks the resource for its ttl,
// no longer.
func TestObtainTakesOverAfterExpiry(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	key, _ := s.leaser.KeysForTest("r")
	require.NoError(t, s.rdb.Set(ctx, key, "a-dead-holder", 300*time.Millisecond).Err())

	_, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
	require.ErrorIs(t, err, locks.ErrNotObtained)
	l, err := s.leaser.Obtain(ctx, "r", 10*time.Second, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

func TestObtainContextEnds(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	l1, err := s.leaser.Obtain(context.Background(), "r", 10*time.Second, 0)
	require.NoError(t, err)
	defer l1.Release(context.Background())

	// Canceled once the Obtain was refused: it ends while waiting.
	rdb := newSignalClient(s.rdb)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-rdb.refused; cancel() }()
	_, err = s.newLeaser(t, rdb).Obtain(ctx, "r", 10*time.Second, time.Minute)
	require.ErrorIs(t, err, locks.ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)
}

func TestObtainSingleWinner(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	var (
		wg   sync.WaitGroup
		won  atomic.Int32
		mu   sync.Mutex
		held []*locks.Lease
	)
	for range 20 {
		wg.Go(func() {
			l, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
			if err != nil {
				assert.ErrorIs(t, err, locks.ErrNotObtained)
				return
			}
			won.Add(1)
			mu.Lock()
			held = append(held, l)
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), won.Load())
	for _, l := range held {
		require.NoError(t, l.Release(ctx))
	}
}

// Release deletes the lease only if it is still ours.
func TestReleaseIsTokenChecked(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	l, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
	require.NoError(t, err)
	key, _ := s.leaser.KeysForTest("r")
	require.NoError(t, s.rdb.Set(ctx, key, "someone-else", time.Minute).Err())

	err = l.Release(ctx)
	require.ErrorIs(t, err, locks.ErrNotHeld)
	assert.Equal(t, "someone-else", s.leaseOwner(t, "r"), "another owner's lease is left alone")
}

func BenchmarkLeaseObtainRelease(b *testing.B) {
	s := newSetup(b)
	ctx := context.Background()
	for b.Loop() {
		l, err := s.leaser.Obtain(ctx, "bench", 10*time.Second, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// The floor under BenchmarkLeaseObtainRelease: the same two writes as plain
// commands (SET NX PX, DEL) on the same fsync-always server.
func BenchmarkRedisSetDelBaseline(b *testing.B) {
	s := newSetup(b)
	ctx := context.Background()
	for b.Loop() {
		if err := s.rdb.SetNX(ctx, s.prefix+"baseline", "x", 10*time.Second).Err(); err != nil {
			b.Fatal(err)
		}
		if err := s.rdb.Del(ctx, s.prefix+"baseline").Err(); err != nil {
			b.Fatal(err)
		}
	}
}
