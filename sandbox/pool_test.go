package sandbox

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// poolOf returns p's warm and starting boxes and its measured start
// latency (zeros when the profile has no pool).
func (s *setup) poolOf(p Profile) (warm, starting int, latency time.Duration) {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	pl := s.rt.pools[p.key()]
	if pl == nil {
		return 0, 0, 0
	}
	return len(pl.warm), pl.starting, pl.latency
}

// waitPool waits until p's pool holds exactly warm boxes and none starting.
func (s *setup) waitPool(p Profile, warm int) {
	s.t.Helper()
	testsvc.Eventually(s.t, 90*time.Second, 5*time.Millisecond, func() bool {
		w, st, _ := s.poolOf(p)
		return w == warm && st == 0
	}, "pool of %s never held %d warm boxes", p.key(), warm)
}

// waitGrown waits until p's pool holds at least warm boxes.
func (s *setup) waitGrown(p Profile, warm int) {
	s.t.Helper()
	testsvc.Eventually(s.t, 90*time.Second, 5*time.Millisecond, func() bool {
		w, _, _ := s.poolOf(p)
		return w >= warm
	}, "pool of %s never grew to %d warm boxes", p.key(), warm)
}

// demand records takes of p, as if jobs had taken boxes, enough for its
// demand term λ × L to be at least extra boxes at the latency measured now.
func (s *setup) demand(p Profile, extra int) {
	s.t.Helper()
	s.rt.mu.Lock()
	pl := s.rt.pools[p.key()]
	require.NotNil(s.t, pl)
	require.Positive(s.t, pl.latency, "no start measured yet")
	w := s.rt.cfg.PoolWindow
	n := int(int64(extra)*int64(w)/int64(pl.latency)) + 1
	now := time.Now()
	for range n {
		pl.noteTake(now, w)
	}
	s.rt.mu.Unlock()
	s.rt.kick()
}

// watchTotal samples the warm and starting boxes of every profile until
// the test ends and returns the peak seen so far.
func (s *setup) watchTotal() func() int {
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			s.rt.mu.Lock()
			n := 0
			for _, p := range s.rt.pools {
				n += p.have()
			}
			s.rt.mu.Unlock()
			if int64(n) > peak.Load() {
				peak.Store(int64(n))
			}
		}
	}()
	s.t.Cleanup(func() { close(stop); wg.Wait() })
	return func() int { return int(peak.Load()) }
}

// A drained pool of 2 is refilled by two starts at once, not one after
// the other.
func TestPoolRefillsInParallel(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *Config) { c.PoolSize = 2 })
	s.session(small) // the profile's first take: a cold start
	s.waitPool(small, 2)
	s.session(small)
	s.session(small)
	peak := 0
	testsvc.Eventually(t, 90*time.Second, time.Millisecond, func() bool {
		w, st, _ := s.poolOf(small)
		peak = max(peak, st)
		return w == 2
	}, "the pool was never refilled")
	assert.Equal(t, 2, peak, "boxes starting at once while refilling a drained pool of 2")
}

// Stopping the runtime while two refill starts are in flight leaves no
// container behind (newSetup's cleanup checks the engine too).
func TestPoolStopDuringParallelRefill(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *Config) { c.PoolSize = 2 })
	s.session(small).Close()
	s.waitPool(small, 2)
	s.session(small).Close()
	s.session(small).Close() // closed before Stop, which does not wait for sessions
	testsvc.Eventually(t, 90*time.Second, time.Millisecond, func() bool {
		_, st, _ := s.poolOf(small)
		return st == 2
	}, "two starts never ran at once")
	s.rt.Stop()
	w, st, _ := s.poolOf(small)
	assert.Zero(t, w+st, "warm or starting boxes after Stop")
	requireNoContainers(t, s.docker, s.owner)
}

// A profile taken from faster than it refills grows above PoolSize, and
// shrinks back once its takes leave the window.
func TestPoolDemandGrowsAndShrinks(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *Config) { c.PoolSize = 1; c.PoolStarts = 3; c.PoolWindow = 10 * time.Second })
	s.session(small)
	s.waitPool(small, 1)
	s.demand(small, 4)
	s.waitGrown(small, 4)
	s.waitPool(small, 1) // the window passed: the surplus is retired
}

// A busy profile that holds all of PoolMax gives boxes back when another
// profile is used: that one gets its reserve, and PoolMax is never passed.
func TestPoolReservePerProfile(t *testing.T) {
	t.Parallel()
	s := newSetup(t, func(c *Config) { c.PoolSize = 2; c.PoolMax = 4; c.PoolWindow = time.Minute })
	peak := s.watchTotal()
	other := small
	other.TmpfsMB = 8
	s.session(small)
	s.waitPool(small, 2)
	s.demand(small, 4)
	s.waitPool(small, 4) // all of PoolMax (the ceiling of a lone profile)
	s.session(other)
	s.waitPool(other, 2)
	s.waitPool(small, 2)
	assert.LessOrEqual(t, peak(), 4, "warm and starting boxes above PoolMax")
}
