package asynqx

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Wake-ups (worker.Config.Wakeups): an idle asynq processor polls Redis: after a
// round of empty dequeues it sleeps TaskCheckInterval/2 + rand[0,
// TaskCheckInterval) and tries every queue again, one dequeue script per
// queue. The sleep cannot be interrupted (asynq v0.26 has no API for it), so
// a short interval buys latency with Redis load: 100 ms costs ~100 commands
// a second per idle worker, 20 ms ~400.
//
// With wake-ups the worker gives asynq a Redis client whose dequeue script
// waits at a gate first: a queue found empty is not asked again until a
// wake-up for it arrives (the scheduler publishes one on job.WakeSubject
// after each enqueue) or TaskCheckInterval has passed since it was found
// empty (the backstop: tasks the forwarder moves from the scheduled and
// retry sets, wake-ups lost on the way). asynq's own sleep is set to
// GatedRoundGap, so the processor spends its idle time at the gate, where a
// wake-up reaches it at once.
//
// The gate recognizes asynq's dequeue by its keys (pending, paused, active
// and lease of one queue, in that order: asynq's rdb.Dequeue). A test
// (TestWakeGateSeesDequeues) fails when an asynq upgrade changes them; the
// worker would then still work, polling at GatedRoundGap.

// GatedRoundGap is asynq's TaskCheckInterval under the gate: the pause after
// a round of empty dequeues, before the next round reaches the gate.
const GatedRoundGap = 2 * time.Millisecond

// Gate answers asynq's dequeues of queues known to be empty itself, and
// holds the processor back while every queue is.
//
// A queue is known empty when its last dequeue found nothing, no wake-up
// for it came since that dequeue started, and the backstop (idle) has not
// passed since. A dequeue of a queue not known empty goes to Redis. One of a
// known-empty queue is answered "nothing" at once while another queue is not
// known empty (the processor asks the queues one after the other, so it
// moves on to that one); when all are, it waits for a wake-up of any queue
// or the first backstop, then looks again.
type Gate struct {
	idle time.Duration // the backstop: TaskCheckInterval
	stop chan struct{} // closed by close: every wait ends

	mu     sync.Mutex
	queues map[string]*gateQueue // the worker's queues; wake-ups of others are ignored
	ch     chan struct{}         // closed and replaced on each wake-up
	closed bool
	once   sync.Once

	// Counters (tests): dequeues sent to Redis, answered by the gate, and
	// waits that a wake-up and the backstop ended; waiting is the number
	// of dequeues waiting at the gate now.
	sent, answered, woken, backstops int
	waiting                          int
}

// gateQueue is one queue's state at the gate.
type gateQueue struct {
	wakes   uint64    // wake-ups so far
	emptyAt uint64    // wakes when the dequeue that found it empty started
	empty   bool      // the last dequeue found nothing
	since   time.Time // when it was found empty
}

func NewGate(idle time.Duration, queues []string) *Gate {
	g := &Gate{idle: idle, stop: make(chan struct{}), queues: map[string]*gateQueue{}, ch: make(chan struct{})}
	for _, q := range queues {
		g.queues[q] = &gateQueue{}
	}
	return g
}

// knownEmpty reports whether q needs no dequeue now, and if so for how long.
func (g *Gate) knownEmpty(q *gateQueue) (bool, time.Duration) {
	left := g.idle - time.Since(q.since)
	return q.empty && q.emptyAt == q.wakes && left > 0, left
}

// Wake lets the next dequeue of queue through at once.
func (g *Gate) Wake(queue string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[queue]
	if q == nil {
		return
	}
	q.wakes++
	close(g.ch)
	g.ch = make(chan struct{})
}

// Close ends every wait (the worker stops); later dequeues pass.
func (g *Gate) Close() {
	g.once.Do(func() {
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		close(g.stop)
	})
}

// enter decides a dequeue of queue: ask Redis (true, with the wake-up count
// to hand to leave) or answer "nothing" (false). It waits while every queue
// is known empty.
func (g *Gate) enter(ctx context.Context, queue string) (ask bool, wakes uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		q := g.queues[queue]
		if q == nil || g.closed || ctx.Err() != nil {
			g.sent++
			return true, 0 // not a queue of ours, or stopping: no gate
		}
		if e, _ := g.knownEmpty(q); !e {
			g.sent++
			return true, q.wakes
		}
		wait := g.idle
		for _, o := range g.queues {
			e, left := g.knownEmpty(o)
			if !e {
				g.answered++
				return false, 0 // the processor moves on to o
			}
			wait = min(wait, left)
		}
		ch := g.ch
		g.waiting++
		g.mu.Unlock()
		t := time.NewTimer(wait)
		var n *int
		select {
		case <-ch:
			n = &g.woken
		case <-t.C:
			n = &g.backstops
		case <-g.stop:
		case <-ctx.Done():
		}
		t.Stop()
		g.mu.Lock()
		g.waiting--
		if n != nil {
			*n++
		}
	}
}

// leave records what a dequeue sent to Redis found. wakes is enter's count:
// a wake-up that came while the script ran makes the next dequeue ask again.
func (g *Gate) leave(queue string, wakes uint64, found bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.queues[queue]; q != nil {
		q.empty, q.emptyAt, q.since = !found, wakes, time.Now()
	}
}

// stats returns the counters.
func (g *Gate) stats() (sent, answered, woken, backstops int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sent, g.answered, g.woken, g.backstops
}

// Client is rdb for an asynq server whose dequeues wait at g: every call
// passes through to rdb, except that a dequeue script waits at the gate
// first. Give the server GatedRoundGap as its TaskCheckInterval.
func (g *Gate) Client(rdb redis.UniversalClient) redis.UniversalClient {
	return gatedClient{UniversalClient: rdb, g: g}
}

// gatedClient is the Redis client of Client.
type gatedClient struct {
	redis.UniversalClient
	g *Gate
}

// dequeueQueue returns the queue a script call dequeues from, or false when
// the call is not asynq's dequeue (keys asynq:{q}:pending, :paused,
// :active, :lease).
func dequeueQueue(keys []string) (string, bool) {
	if len(keys) != 4 {
		return "", false
	}
	q, ok := strings.CutSuffix(keys[0], "}:pending")
	if !ok || !strings.HasPrefix(q, "asynq:{") {
		return "", false
	}
	prefix := q + "}:"
	if keys[1] != prefix+"paused" || keys[2] != prefix+"active" || keys[3] != prefix+"lease" {
		return "", false
	}
	return strings.TrimPrefix(q, "asynq:{"), true
}

func (c gatedClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	q, ok := dequeueQueue(keys)
	if !ok {
		return c.UniversalClient.EvalSha(ctx, sha, keys, args...)
	}
	ask, n := c.g.enter(ctx, q)
	if !ask {
		cmd := redis.NewCmd(ctx, "evalsha", sha)
		cmd.SetErr(redis.Nil) // what the script answers for an empty queue
		return cmd
	}
	cmd := c.UniversalClient.EvalSha(ctx, sha, keys, args...)
	if !isNoScript(cmd.Err()) { // Script.Run calls Eval next
		c.g.leave(q, n, cmd.Err() == nil)
	}
	return cmd
}

// Eval is what redis.Script.Run falls back to when the server does not
// know the script yet (NOSCRIPT): EvalSha passed the gate already.
func (c gatedClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	cmd := c.UniversalClient.Eval(ctx, script, keys, args...)
	if q, ok := dequeueQueue(keys); ok {
		c.g.mu.Lock()
		var n uint64
		if gq := c.g.queues[q]; gq != nil {
			n = gq.wakes
		}
		c.g.mu.Unlock()
		c.g.leave(q, n, cmd.Err() == nil)
	}
	return cmd
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }
