package startstop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter is a loop that counts its runs and blocks until cancelled.
type counter struct {
	runs    atomic.Int64
	running atomic.Int64 // loops running now; never above 1
	max     atomic.Int64
	started chan struct{}
}

func newCounter() *counter { return &counter{started: make(chan struct{}, 100)} }

func (c *counter) loop(ctx context.Context) {
	n := c.running.Add(1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			break
		}
	}
	c.runs.Add(1)
	select {
	case c.started <- struct{}{}:
	default: // nobody waits for this run
	}
	<-ctx.Done()
	c.running.Add(-1)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, time.Millisecond)
}

// watched wraps loop so that the test can see it return: exited is closed
// once loop has returned, and loop is the only caller of its passes.
func watched(loop func(context.Context)) (wrapped func(context.Context), exited <-chan struct{}) {
	ch := make(chan struct{})
	return func(ctx context.Context) {
		defer close(ch)
		loop(ctx)
	}, ch
}

// requireExited fails unless the loop has returned: after that no pass can
// come, so nothing needs waiting for to show that none does.
func requireExited(t *testing.T, exited <-chan struct{}) {
	t.Helper()
	select {
	case <-exited:
	default:
		t.Fatal("Stop returned while the loop still ran: a pass could follow")
	}
}

func TestStopBeforeStart(t *testing.T) {
	t.Parallel()
	var s Service
	assert.False(t, s.Stop())
	assert.False(t, s.Stop())
	assert.False(t, s.Running())
	c := newCounter()
	require.NoError(t, s.Start(context.Background(), c.loop))
	<-c.started
	assert.True(t, s.Stop())
	assert.Zero(t, c.running.Load())
}

func TestStartStopIdempotent(t *testing.T) {
	t.Parallel()
	var s Service
	c := newCounter()
	require.NoError(t, s.Start(context.Background(), c.loop))
	require.NoError(t, s.Start(context.Background(), c.loop))
	<-c.started
	assert.True(t, s.Running())
	assert.True(t, s.Stop())
	assert.False(t, s.Stop())
	assert.False(t, s.Running())
	assert.Equal(t, int64(1), c.runs.Load(), "a second Start on a running service starts nothing")
	assert.Zero(t, c.running.Load(), "Stop returns after the loop returned")
}

func TestRepeatedStartStop(t *testing.T) {
	t.Parallel()
	var s Service
	c := newCounter()
	for range 100 {
		require.NoError(t, s.Start(context.Background(), c.loop))
		require.NoError(t, s.Start(context.Background(), c.loop))
		s.Stop()
		s.Stop()
	}
	assert.Equal(t, int64(100), c.runs.Load())
	assert.Zero(t, c.running.Load())
}

func TestConcurrentStartStop(t *testing.T) {
	t.Parallel()
	var s Service
	c := newCounter()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				assert.NoError(t, s.Start(context.Background(), c.loop))
				s.Stop()
			}
		})
	}
	wg.Wait()
	s.Stop()
	assert.Equal(t, int64(1), c.max.Load(), "two runs of the loop overlapped")
	assert.Zero(t, c.running.Load())
}

func TestLoopContextIsDetached(t *testing.T) {
	t.Parallel()
	type key struct{}
	var s Service
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	got := make(chan any, 1)
	require.NoError(t, s.Start(ctx, func(ctx context.Context) {
		cancel() // the caller's cancellation does not reach the loop
		select {
		case <-ctx.Done():
			got <- ctx.Err()
		case <-time.After(50 * time.Millisecond):
			got <- ctx.Value(key{})
		}
		<-ctx.Done()
	}))
	assert.Equal(t, "v", <-got)
	assert.True(t, s.Stop())
}

func TestLoopReturnsOnItsOwn(t *testing.T) {
	t.Parallel()
	var s Service
	var runs atomic.Int64
	returned := make(chan struct{}, 10)
	loop := func(ctx context.Context) {
		runs.Add(1)
		returned <- struct{}{}
	}
	require.NoError(t, s.Start(context.Background(), loop))
	<-returned
	waitFor(t, func() bool { return !s.Running() })
	// The loop stopped itself: Stop has nothing to stop and returns at once,
	// and Start runs the loop again.
	require.NoError(t, s.Start(context.Background(), loop))
	<-returned
	waitFor(t, func() bool { return !s.Running() })
	assert.False(t, s.Stop())
	assert.False(t, s.Stop())
	require.NoError(t, s.Start(context.Background(), loop))
	<-returned
	s.Stop()
	assert.Equal(t, int64(3), runs.Load())
}

func TestStartWith(t *testing.T) {
	t.Parallel()
	var s Service
	c := newCounter()
	var firsts atomic.Int64
	boom := errors.New("boom")
	fail := func(context.Context) error { firsts.Add(1); return boom }
	ok := func(context.Context) error { firsts.Add(1); return nil }

	require.ErrorIs(t, s.StartWith(context.Background(), fail, c.loop), boom)
	assert.False(t, s.Running(), "a failed first step starts no loop")
	assert.False(t, s.Stop())
	assert.Zero(t, c.runs.Load())

	require.NoError(t, s.StartWith(context.Background(), ok, c.loop))
	require.NoError(t, s.StartWith(context.Background(), ok, c.loop))
	<-c.started
	assert.Equal(t, int64(2), firsts.Load(), "first runs only when the loop starts")
	assert.True(t, s.Stop())

	// The first step sees the caller's context, cancellation included.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.StartWith(ctx, func(ctx context.Context) error { return ctx.Err() }, c.loop)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, s.Running())
}

func TestNowAndEvery(t *testing.T) {
	t.Parallel()
	var s Service
	var passes atomic.Int64
	// With an hour's interval and a Stop at once, the pass made at the
	// start is the only one (Stop waits for the loop, so it has come).
	require.NoError(t, s.Start(context.Background(), NowAndEvery(time.Hour, func(context.Context) { passes.Add(1) })))
	s.Stop()
	assert.Equal(t, int64(1), passes.Load(), "one pass at once, the next only after the interval")

	passes.Store(0)
	loop, exited := watched(NowAndEvery(time.Millisecond, func(context.Context) { passes.Add(1) }))
	require.NoError(t, s.Start(context.Background(), loop))
	waitFor(t, func() bool { return passes.Load() >= 5 })
	s.Stop()
	requireExited(t, exited)
}

func TestEvery(t *testing.T) {
	t.Parallel()
	var s Service
	var passes atomic.Int64
	// The same start and Stop as in TestNowAndEvery, where it gives one
	// pass: a loop that made a pass at its start would have made it here.
	require.NoError(t, s.Start(context.Background(), Every(time.Hour, func(context.Context) { passes.Add(1) })))
	s.Stop()
	assert.Zero(t, passes.Load(), "the first pass comes one interval after the start")

	loop, exited := watched(Every(time.Millisecond, func(context.Context) { passes.Add(1) }))
	require.NoError(t, s.Start(context.Background(), loop))
	waitFor(t, func() bool { return passes.Load() >= 5 })
	s.Stop()
	requireExited(t, exited)
}

func TestStopWaitsForPassInProgress(t *testing.T) {
	t.Parallel()
	var s Service
	in, cancelled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	require.NoError(t, s.Start(context.Background(), NowAndEvery(time.Hour, func(ctx context.Context) {
		close(in)
		<-ctx.Done()
		close(cancelled)
		<-release // cleanup after cancellation that needs another goroutine
		finished.Store(true)
	})))
	<-in
	go func() {
		<-cancelled // Stop has begun: it cancelled the pass
		close(release)
	}()
	s.Stop()
	assert.True(t, finished.Load(), "Stop returned before the pass in progress ended")
}
