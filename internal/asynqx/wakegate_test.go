package asynqx

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// gated is an asynq server whose dequeues wait at a gate, on a real Redis.
type gated struct {
	g       *Gate
	c       *asynq.Client
	rdb     *redis.Client
	handled *atomic.Int64 // tasks handled
}

// gatedServer starts an asynq server over a gatedClient on a real Redis,
// with a backstop so long that only a wake-up can make it ask Redis again.
func gatedServer(t *testing.T, queues ...string) gated {
	t.Helper()
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	weights := map[string]int{}
	for i, q := range queues {
		weights[q] = len(queues) - i
	}
	g := NewGate(time.Hour, queues)
	srv := asynq.NewServerFromRedisClient(g.Client(rdb), asynq.Config{
		Concurrency: 2, Queues: weights, TaskCheckInterval: GatedRoundGap, LogLevel: asynq.ErrorLevel,
	})
	var handled atomic.Int64
	mux := asynq.NewServeMux()
	mux.HandleFunc("t", func(context.Context, *asynq.Task) error { handled.Add(1); return nil })
	require.NoError(t, srv.Start(mux))
	t.Cleanup(func() {
		g.Close()
		srv.Shutdown() // returns only because close ended the wait at the gate
	})
	return gated{g: g, c: asynq.NewClientFromRedisClient(rdb), rdb: rdb, handled: &handled}
}

// waitIdle waits until the gate holds the processor: every queue was asked
// and found empty, and a wait began.
func waitIdle(t *testing.T, g *Gate) {
	t.Helper()
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, q := range g.queues {
			if !q.empty {
				return false
			}
		}
		return g.waiting > 0
	}, 10*time.Second, 5*time.Millisecond)
}

// TestWakeGateSeesDequeues fails when asynq's dequeue no longer looks like
// what dequeueQueue recognizes (an asynq upgrade): the gate would see no
// dequeue, and the worker would poll Redis every GatedRoundGap.
func TestWakeGateSeesDequeues(t *testing.T) {
	s := gatedServer(t, "critical", "default", "low")
	waitIdle(t, s.g)
	sent, _, _, _ := s.g.stats()
	assert.GreaterOrEqual(t, sent, 3, "each queue was asked once before the gate knew it empty")
}

// TestWakeGateHoldsIdleWorker: an idle processor asks Redis nothing for a
// queue known empty, and a job enqueued there without a wake-up waits (for
// the backstop, an hour here). The witness that it had its chance: a job
// on another queue, with its wake-up, after it. The processor takes that
// one and makes a whole round of the queues before it waits again; a
// dequeue of default in that round that reached Redis would have taken
// the first job.
func TestWakeGateHoldsIdleWorker(t *testing.T) {
	s := gatedServer(t, "critical", "default", "low")
	waitIdle(t, s.g)
	_, err := s.c.Enqueue(asynq.NewTask("t", nil), asynq.Queue("default"))
	require.NoError(t, err)
	_, err = s.c.Enqueue(asynq.NewTask("t", nil), asynq.Queue("critical"))
	require.NoError(t, err)
	s.g.Wake("critical")
	require.Eventually(t, func() bool { return s.handled.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	waitIdle(t, s.g) // the round after the witness job ended at the gate
	assert.Equal(t, int64(1), s.handled.Load(), "the job was taken without a wake-up")
	pending, err := s.rdb.LLen(context.Background(), "asynq:{default}:pending").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), pending, "no dequeue of default reached Redis while it was known empty")
}

// TestWakeGateWakeUp: a wake-up of one queue lets the processor through
// the other known-empty queues (answered by the gate) to that one, which
// it asks Redis for, and the job runs; a wake-up of a queue the worker does
// not serve changes nothing.
func TestWakeGateWakeUp(t *testing.T) {
	s := gatedServer(t, "critical", "default", "low")
	g, c, handled := s.g, s.c, s.handled
	waitIdle(t, g)
	g.Wake("elsewhere")
	_, err := c.Enqueue(asynq.NewTask("t", nil), asynq.Queue("low"))
	require.NoError(t, err)
	g.Wake("low")
	// Only the wake-up can have let it through: the backstop is an hour.
	// (Whether the processor was already waiting when it came, or between
	// two rounds, depends on the scheduling: no counter is asserted.)
	require.Eventually(t, func() bool { return handled.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	_, _, _, backstops := g.stats()
	assert.Zero(t, backstops)

	// A second job, woken while the processor is anywhere in its round.
	for i := range 20 {
		_, err := c.Enqueue(asynq.NewTask("t", nil), asynq.Queue([]string{"critical", "default", "low"}[i%3]))
		require.NoError(t, err)
		g.Wake([]string{"critical", "default", "low"}[i%3])
	}
	require.Eventually(t, func() bool { return handled.Load() == 21 }, 10*time.Second, 5*time.Millisecond)
}

// TestWakeGateWakeDuringDequeue: a wake-up that arrives while a dequeue
// of the queue is in flight (it may have looked before the job was there)
// makes the next dequeue ask Redis again.
func TestWakeGateWakeDuringDequeue(t *testing.T) {
	g := NewGate(time.Hour, []string{"q"})
	ask, n := g.enter(context.Background(), "q")
	require.True(t, ask)
	g.Wake("q") // the job lands and its wake-up comes before the script's answer
	g.leave("q", n, false)
	ask, _ = g.enter(context.Background(), "q")
	assert.True(t, ask, "the wake-up during the dequeue was lost")

	g.leave("q", n+1, false)
	done := make(chan bool)
	go func() { a, _ := g.enter(context.Background(), "q"); done <- a }()
	// The dequeue either waits at the gate (the witness: it is counted
	// waiting) or, wrongly, passes it at once.
	var passed atomic.Bool
	require.Eventually(t, func() bool {
		select {
		case <-done:
			passed.Store(true)
			return true
		default:
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.waiting == 1
	}, 10*time.Second, time.Millisecond)
	require.False(t, passed.Load(), "a known-empty queue was asked without a wake-up")
	g.Close()
	assert.True(t, <-done, "close lets a waiting dequeue through")
}

// TestWakeGateBackstop: without a wake-up, a queue found empty is asked
// again once the backstop passed.
func TestWakeGateBackstop(t *testing.T) {
	g := NewGate(50*time.Millisecond, []string{"q"})
	_, n := g.enter(context.Background(), "q")
	g.leave("q", n, false)
	ask, _ := g.enter(context.Background(), "q")
	assert.True(t, ask)
	_, _, woken, backstops := g.stats()
	assert.Zero(t, woken)
	assert.Equal(t, 1, backstops)
}

func TestDequeueQueue(t *testing.T) {
	q, ok := dequeueQueue([]string{"asynq:{default}:pending", "asynq:{default}:paused", "asynq:{default}:active", "asynq:{default}:lease"})
	assert.True(t, ok)
	assert.Equal(t, "default", q)
	for _, keys := range [][]string{
		{"asynq:{default}:pending", "asynq:{default}:paused", "asynq:{default}:active"},
		{"asynq:{default}:pending", "asynq:{other}:paused", "asynq:{default}:active", "asynq:{default}:lease"},
		{"asynq:{default}:scheduled", "asynq:{default}:paused", "asynq:{default}:active", "asynq:{default}:lease"},
		{"paddock:x", "a", "b", "c"},
	} {
		_, ok := dequeueQueue(keys)
		assert.False(t, ok, "%v", keys)
	}
}
