package locks_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/locks"
)

var errInjected = errors.New("injected fault")

const (
	faultNone int32 = iota
	faultFail       // every call fails at once
	faultHang       // every call blocks, ignoring its context, until unhang
)

// faultyClient wraps the real client: it passes calls through, fails them,
// or hangs them, and counts the outcomes.
type faultyClient struct {
	locks.RedisClient
	mode   atomic.Int32
	unhang chan struct{}
	failed atomic.Int64 // calls failed by injection
	ok     atomic.Int64 // calls passed through that succeeded
}

func newFaultyClient(real locks.RedisClient) *faultyClient {
	return &faultyClient{RedisClient: real, unhang: make(chan struct{})}
}

func (c *faultyClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, func() *redis.Cmd { return c.RedisClient.Eval(ctx, script, keys, args...) })
}

func (c *faultyClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, func() *redis.Cmd { return c.RedisClient.EvalSha(ctx, sha1, keys, args...) })
}

func (c *faultyClient) do(ctx context.Context, call func() *redis.Cmd) *redis.Cmd {
	switch c.mode.Load() {
	case faultFail:
		c.failed.Add(1)
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errInjected)
		return cmd
	case faultHang:
		c.failed.Add(1)
		<-c.unhang
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errInjected)
		return cmd
	}
	cmd := call()
	if cmd.Err() == nil {
		c.ok.Add(1)
	}
	return cmd
}

// watchUntilLost checks, until the lease's Lost fires, the guarantee that a
// lease is never reported held past its ttl: whenever the key is seen gone
// from Redis, Lost must already be closed (the check reads Redis first, so
// no timing bound is needed).
func watchUntilLost(t *testing.T, s *setup, l *locks.Lease, owner string, within time.Duration) {
	t.Helper()
	// Polled every 2 ms: each round must read Redis, then Lost.
	testsvc.Eventually(t, within, 2*time.Millisecond, func() bool {
		if s.leaseOwner(t, l.Resource()) != owner {
			require.True(t, closed(l.Lost()), "the lease key is gone but Lost has not fired: reported held past the ttl")
			return true
		}
		return closed(l.Lost())
	}, "Lost did not fire")
}

func TestLeaseRefreshKeepsItAlive(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	ttl := 1500 * time.Millisecond // fsync'd AOF on a loaded machine: not much less
	l, err := s.leaser.Obtain(ctx, "r", ttl, 0)
	require.NoError(t, err)
	owner := s.leaseOwner(t, "r")

	// Hold for several ttls: only the watchdog keeps the key alive. The
	// witness is the refreshes themselves, seen as the key's expiry moving
	// forward: 8 of them, every ttl/3, span well past the ttl.
	key, _ := s.leaser.KeysForTest("r")
	refreshes, last := 0, ttl
	testsvc.Eventually(t, 20*ttl, 20*time.Millisecond, func() bool {
		require.Equal(t, owner, s.leaseOwner(t, "r"))
		require.False(t, closed(l.Lost()))
		pttl, err := s.rdb.PTTL(ctx, key).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, pttl, ttl)
		if pttl > last {
			refreshes++
		}
		last = pttl
		return refreshes >= 8
	}, "8 refreshes of the watchdog (the key's expiry moving forward)")
	require.NoError(t, l.Release(ctx))
	assert.Empty(t, s.leaseOwner(t, "r"))
	assert.Nil(t, l.Err())
}

func TestLeaseLostWhenTakenOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steal func(s *setup, key string) error
	}{
		{"key deleted", func(s *setup, key string) error { return s.rdb.Del(context.Background(), key).Err() }},
		{"key held by another owner", func(s *setup, key string) error {
			return s.rdb.Set(context.Background(), key, "someone-else", time.Minute).Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			ctx := context.Background()
			l, err := s.leaser.Obtain(ctx, "r", 3*time.Second, 0)
			require.NoError(t, err)
			key, _ := s.leaser.KeysForTest("r")
			require.NoError(t, tc.steal(s, key))

			select {
			case <-l.Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("Lost did not fire")
			}
			err = l.Err()
			require.ErrorIs(t, err, locks.ErrLeaseLost)
			var le *locks.LostError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, l.Token(), le.Token)
			assert.Contains(t, le.Reason, "another owner")
			assert.True(t, locks.Retryable(err))
			require.ErrorIs(t, l.Release(ctx), locks.ErrNotHeld)
		})
	}
}

// Refreshes that keep failing lose the lease within the ttl, before Redis
// expires the key; then the next holder gets it with a higher token.
func TestLeaseLostWhenRefreshesFail(t *testing.T) {
	t.Parallel()
	for _, mode := range []int32{faultFail, faultHang} {
		t.Run(map[int32]string{faultFail: "failing", faultHang: "hanging"}[mode], func(t *testing.T) {
			t.Parallel()
			s := newSetup(t)
			ctx := context.Background()
			faulty := newFaultyClient(s.rdb)
			leaser := s.newLeaser(t, faulty)
			ttl := time.Second
			start := time.Now()
			l, err := leaser.Obtain(ctx, "r", ttl, 0)
			require.NoError(t, err)
			owner := s.leaseOwner(t, "r")
			faulty.mode.Store(mode)

			watchUntilLost(t, s, l, owner, 30*time.Second)
			lostAfter := time.Since(start)
			assert.GreaterOrEqual(t, lostAfter, ttl/2, "one failed refresh must not lose the lease")
			assert.Positive(t, faulty.failed.Load())
			err = l.Err()
			require.ErrorIs(t, err, locks.ErrLeaseLost)
			if mode == faultFail {
				require.ErrorIs(t, err, errInjected, "the last refresh error is the cause")
			}

			next, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 30*time.Second)
			require.NoError(t, err)
			assert.Greater(t, next.Token(), l.Token())
			require.NoError(t, next.Release(ctx))

			close(faulty.unhang)
			faulty.mode.Store(faultNone)
			require.ErrorIs(t, l.Release(ctx), locks.ErrNotHeld)
		})
	}
}

// A refresh error shorter than the ttl does not lose the lease.
func TestLeaseSurvivesTransientRefreshErrors(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	faulty := newFaultyClient(s.rdb)
	leaser := s.newLeaser(t, faulty)
	ttl := 3 * time.Second
	l, err := leaser.Obtain(ctx, "r", ttl, 0)
	require.NoError(t, err)
	owner := s.leaseOwner(t, "r")

	// Fail from the obtain until at least one refresh (due after ttl/3) has
	// failed, then heal: the retries, every ttl/10, must win it back.
	faulty.mode.Store(faultFail)
	eventually(t, 30*time.Second, func() bool { return faulty.failed.Load() > 0 }, "a refresh was attempted")
	faulty.mode.Store(faultNone)
	okBefore := faulty.ok.Load()
	eventually(t, 30*time.Second, func() bool { return faulty.ok.Load() > okBefore || closed(l.Lost()) },
		"a refresh succeeded after the fault")
	require.False(t, closed(l.Lost()), "lost: %v", l.Err())
	assert.Equal(t, owner, s.leaseOwner(t, "r"))
	require.NoError(t, l.Release(ctx))
}

// Redis crashes and comes back (AOF, appendfsync always) while a lease is
// held: the key and the fencing counter survive, the watchdog's failed
// refreshes are retried (and its scripts, lost from the script cache, are
// sent again with EVAL), and the lease is kept as long as the outage is
// shorter than the time left on the ttl.
func TestLeaseSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	spy := newFaultyClient(s.rdb)
	leaser := s.newLeaser(t, spy)
	l, err := leaser.Obtain(ctx, "r", 5*time.Second, 0)
	require.NoError(t, err)
	owner := s.leaseOwner(t, "r")

	s.redis.Restart()
	okBefore := spy.ok.Load()
	eventually(t, 30*time.Second, func() bool { return spy.ok.Load() > okBefore || closed(l.Lost()) },
		"a refresh succeeded after the restart")
	require.False(t, closed(l.Lost()), "lost: %v", l.Err())
	assert.Equal(t, owner, s.leaseOwner(t, "r"), "the lease key survived the restart")

	_, err = s.leaser.Obtain(ctx, "r", time.Second, 0)
	require.ErrorIs(t, err, locks.ErrNotObtained, "still exclusive")
	require.NoError(t, l.Release(ctx))

	next, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
	require.NoError(t, err)
	assert.Equal(t, l.Token()+1, next.Token(), "the fencing counter survived the restart")
	require.NoError(t, next.Release(ctx))
}

// An outage longer than the ttl loses the lease (Lost fires while Redis is
// still down), and the key does not outlive its ttl across the restart:
// expiry times are absolute in the AOF.
func TestLeaseLostWhenRedisDownPastTTL(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	ttl := 500 * time.Millisecond
	l, err := s.leaser.Obtain(ctx, "r", ttl, 0)
	require.NoError(t, err)

	s.redis.Stop()
	select {
	case <-l.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("Lost did not fire while Redis was down")
	}
	require.ErrorIs(t, l.Err(), locks.ErrLeaseLost)
	// sleep: the key's absolute expiry must pass while Redis is down (nothing to ask it).
	time.Sleep(ttl)
	s.redis.Restart()

	assert.Empty(t, s.leaseOwner(t, "r"), "the key expired during the outage")
	next, err := s.leaser.Obtain(ctx, "r", 10*time.Second, 0)
	require.NoError(t, err)
	assert.Greater(t, next.Token(), l.Token())
	require.NoError(t, next.Release(ctx))
	require.ErrorIs(t, l.Release(ctx), locks.ErrNotHeld)
}

// The watchdog goroutine ends with every lease (goleak in TestMain checks
// the rest): obtain and release many times, some lost, some not.
func TestLeaseWatchdogStartStopRepeatedly(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	key, _ := s.leaser.KeysForTest("r")
	rdb := newSignalClient(s.rdb)
	leaser := s.newLeaser(t, rdb)
	for i := range 30 {
		l, err := leaser.Obtain(ctx, "r", 90*time.Millisecond, time.Minute)
		require.NoError(t, err)
		obtained := rdb.calls.Load()
		switch i % 3 {
		case 0:
			require.NoError(t, s.rdb.Del(ctx, key).Err())
			eventually(t, 10*time.Second, func() bool { return closed(l.Lost()) }, "lost")
		case 1:
			// A refresh was answered: the watchdog is in its loop, the
			// next refresh due.
			eventually(t, 10*time.Second, func() bool { return rdb.calls.Load() > obtained }, "a refresh")
		}
		// On a loaded machine a 90 ms lease may really be lost: either
		// outcome is fine here, the goroutine must end in both.
		if err := l.Release(ctx); err != nil {
			require.ErrorIs(t, err, locks.ErrNotHeld)
		}
		require.NoError(t, l.Release(ctx))
	}
}
