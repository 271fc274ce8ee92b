package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/job"
)

// Settled is the part of *results.Store the holds poll: which of the held
// jobs' keys have a stored result, in one round trip.
type Settled interface {
	Finished(ctx context.Context, keys []string) (map[string]bool, error)
}

// TaskFinder finds held jobs whose task Redis no longer has (Missing: job
// key → queue in, key → missing out; asynqx.LostTasks, which knows asynq's
// keys). With Config.Tasks set the holds recover a task a Redis failover
// lost; without, such a job is held until AckWait after the scheduler
// stops.
type TaskFinder interface {
	Missing(ctx context.Context, queued map[string]string) (map[string]bool, error)
}

// holds keeps the messages of enqueued jobs unacknowledged until the job
// has a result. That is the admission in front of asynq, which cannot add
// a queue per tenant at run time:
//   - a tenant's consumer delivers at most MaxAckPending messages (its
//     max-running), so its backlog waits in its own stream, in order, and
//     the NATS server enforces the bound across every scheduler;
//   - Config.Slots bounds what this scheduler holds over all tenants, and
//     the readers waiting for a slot take freed ones in turn, so a tenant
//     with one job is not queued behind another's ten thousand (fair share).
//
// A held message is acknowledged when its result is published (the
// scheduler subscribes to every tenant's result subjects; each tenant has
// its own results stream, so there is no one stream to follow) or, should
// that message be missed,
// found in Redis every HoldCheck. It is kept alive with InProgress every
// AckWait/3. When the scheduler stops, held messages are left
// unacknowledged: after AckWait another scheduler gets them, finds the task
// already enqueued and holds them in turn.
type holds struct {
	s     *Scheduler
	slots *slots
	sub   *nats.Subscription // every tenant's results
	svc   startstop.Service
	sizer startstop.Service // AutoSlots
	// resized and empty belong to the sizer's goroutine (and newHolds,
	// before it starts).
	resized time.Time
	empty   bool

	mu sync.Mutex
	m  map[string]heldMsg // job key → its held message
}

// heldMsg is a held submission and the queue of its job's task.
type heldMsg struct {
	jetstream.Msg
	queue string
}

func newHolds(s *Scheduler) (*holds, error) {
	h := &holds{s: s, m: map[string]heldMsg{}, slots: newSlots(s.cfg.Slots)}
	// New results only (a core subscription): older ones are found by
	// check. It needs the subject only; the body comes along (bounded by
	// MaxResultBytes, usually a few KiB).
	sub, err := s.js.Conn().Subscribe(job.SubjectResultPrefix+">", h.onResult)
	if err != nil {
		return nil, fmt.Errorf("scheduler: watch results: %w", err)
	}
	if err := sub.SetPendingLimits(-1, 64<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("scheduler: watch results: %w", err)
	}
	h.sub = sub
	every := min(s.cfg.HoldCheck, s.cfg.AckWait/3)
	if err := h.svc.Start(context.Background(), startstop.Every(every, h.check)); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	if s.cfg.AutoSlots != nil {
		h.resize(context.Background())
		if err := h.sizer.Start(context.Background(), startstop.Every(2*time.Second, h.maybeResize)); err != nil {
			h.stop()
			return nil, err
		}
	}
	return h, nil
}

// maybeResize resizes every 10 s, and every 2 s while the fleet has no
// job slots (a scheduler started before its workers).
func (h *holds) maybeResize(ctx context.Context) {
	if time.Since(h.resized) >= 10*time.Second || h.empty {
		h.resize(ctx)
	}
}

// resize sets the slots to Config.AutoSlots (at least 1); on an error the
// size stays.
func (h *holds) resize(ctx context.Context) {
	h.resized = time.Now()
	n, err := h.s.cfg.AutoSlots(ctx)
	h.empty = err == nil && n == 0
	if err != nil {
		h.s.warnf("scheduler: sizing the fair-share slots failed; keeping the size", "slots", h.slots.size(), "err", err)
		return
	}
	if n = max(n, 1); n != h.slots.size() {
		h.slots.setLimit(n)
		h.s.log.InfoContext(ctx, "fair-share slots", "slots", n)
	}
}

// acquire waits for a free slot; false when stop closes first. Waiters are
// served in arrival order (slots.go), so tenants waiting with a message
// each take freed slots in turn.
func (h *holds) acquire(stop <-chan struct{}) bool { return h.slots.acquire(stop) }

// release frees a slot taken by acquire.
func (h *holds) release() { h.slots.release() }

// add holds msg, whose job (key) is in queue, until the job's result.
func (h *holds) add(key, queue string, msg jetstream.Msg) {
	h.mu.Lock()
	if _, dup := h.m[key]; dup {
		h.mu.Unlock()
		_ = msg.Ack() // an older delivery of the same job is held already
		h.release()
		return
	}
	h.m[key] = heldMsg{msg, queue}
	h.mu.Unlock()
}

// done acknowledges the held message of key, if any, and frees its slot.
func (h *holds) done(key string) {
	h.mu.Lock()
	msg, ok := h.m[key]
	delete(h.m, key)
	h.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		h.s.warnf("scheduler: ack of a finished job failed; the message is redelivered and found finished", "job", key, "err", err)
	}
	h.release()
}

func (h *holds) onResult(m *nats.Msg) {
	if tenant, id, ok := job.ParseResultSubject(m.Subject); ok {
		h.done(job.Key(tenant, id))
	}
}

// check keeps the held messages alive and acknowledges those whose result
// is in Redis (a missed result message), in one round trip for all; it
// hands back those whose task Redis lost (recoverLost).
func (h *holds) check(ctx context.Context) {
	h.mu.Lock()
	held := make(map[string]heldMsg, len(h.m))
	keys := make([]string, 0, len(h.m))
	for k, m := range h.m {
		held[k] = m
		keys = append(keys, k)
	}
	h.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	done, err := h.s.settled.Finished(ctx, keys)
	if err != nil && ctx.Err() == nil {
		h.s.warnf("scheduler: checking the held jobs failed; retrying", "held", len(keys), "err", err)
	}
	open := map[string]string{}
	for key, msg := range held {
		if done[key] {
			h.done(key)
			continue
		}
		if err == nil && msg.queue != "" {
			open[key] = msg.queue
		}
		_ = msg.InProgress()
	}
	h.recoverLost(ctx, open)
}

// recoverLost hands back (NAK, for redelivery now) the held submissions
// of open (key → queue: held, no result) whose task Redis no longer has.
// A Sentinel failover loses the writes the replica had not received, and
// the enqueue of a task can be one of them; the redelivery schedules the
// job again (its id claim is this message's own, or lost too). A task
// that finished between the two checks (result recorded, task deleted)
// is harmless: the redelivery finds the result and acknowledges.
func (h *holds) recoverLost(ctx context.Context, open map[string]string) {
	tf := h.s.cfg.Tasks
	if tf == nil || len(open) == 0 {
		return
	}
	lost, err := tf.Missing(ctx, open)
	if err != nil {
		if ctx.Err() == nil {
			h.s.warnf("scheduler: checking the held jobs' tasks failed; retrying", "held", len(open), "err", err)
		}
		return
	}
	for key, gone := range lost {
		if !gone {
			continue
		}
		h.mu.Lock()
		msg, held := h.m[key]
		delete(h.m, key)
		h.mu.Unlock()
		if !held {
			continue // settled meanwhile
		}
		h.s.log.WarnContext(ctx, "scheduler: a held job's task is gone from Redis without a result (a Redis failover lost it?); scheduling it again", "job", key)
		if err := msg.Nak(); err != nil {
			h.s.warnf("scheduler: handing back a lost job failed; it comes back after AckWait", "job", key, "err", err)
		}
		h.release()
	}
}

// held is the number of messages held now.
func (h *holds) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// stop ends the subscription and the checks; held messages stay
// unacknowledged (see holds).
func (h *holds) stop() {
	_ = h.sub.Unsubscribe()
	h.svc.Stop()
	h.sizer.Stop()
	h.mu.Lock()
	h.m = map[string]heldMsg{}
	h.mu.Unlock()
}
