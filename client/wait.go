package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/paddockhq/paddock/job"
)

const (
	// lookupsInFlight bounds the direct gets one WaitAll has in flight.
	lookupsInFlight = 64
	// relookFirst and relookMax space WaitAll's backstop look-ups (see
	// waiter.lookups), doubling from the first to the last.
	relookFirst = 2 * time.Second
	relookMax   = time.Minute
	// checkEvery is how often WaitAll checks for a reconnect or dropped
	// messages (local counters, no traffic) and whether the backstop is due.
	checkEvery = time.Second
)

// Wait blocks until job id has a terminal result and returns it, whether the
// job ended before or after the call. It returns ctx's error (wrapped) when
// ctx ends first.
func (c *Client) Wait(ctx context.Context, id string) (job.Result, error) {
	rs, err := c.WaitAll(ctx, []string{id}, nil)
	if err != nil {
		return job.Result{}, err
	}
	return rs[0], nil
}

// WaitAll waits for the terminal results of ids and returns them in the
// order of ids (an id may repeat). progress, if not nil, is called each
// time results arrive, with the number of ids done; the calls come from the
// caller's goroutine. On error (ctx ended, a stream missing, a permission
// refused) the slice holds the results received so far and a zero Result
// for the others.
//
// WaitAll first subscribes to the tenant's results (job.ResultSubjects: a
// plain NATS subscription, which sees every result the fleet publishes from
// then on), and only then reads the last result of each id with a direct
// get, lookupsInFlight at a time: a result published before the
// subscription is in the stream, one published after reaches the
// subscription, so none is missed. After a NATS reconnect, or when the
// subscription dropped messages (a slow consumer), it looks the ids still
// pending up again; and it does so now and then anyway (after relookFirst,
// doubling up to relookMax), for a result whose storing lagged its delivery
// (a stream replica behind its leader).
func (c *Client) WaitAll(ctx context.Context, ids []string, progress func(done, total int)) ([]job.Result, error) {
	out := make([]job.Result, len(ids))
	at := make(map[string][]int, len(ids))
	for i, id := range ids {
		if err := job.CheckID(id); err != nil {
			return out, err
		}
		at[id] = append(at[id], i)
	}
	if len(ids) == 0 {
		return out, nil
	}
	w, err := c.startWait(ctx, slices.Collect(maps.Keys(at)))
	if err != nil {
		return out, err
	}
	defer w.stop()
	done := 0
	for done < len(ids) {
		select {
		case f := <-w.found:
			if f.err != nil {
				return out, f.err
			}
			if !w.take(f.id) {
				continue // taken already (by the subscription and a look-up, or a republish)
			}
			for _, i := range at[f.id] {
				out[i] = f.r
			}
			done += len(at[f.id])
			if progress != nil {
				progress(done, len(ids))
			}
		case <-ctx.Done():
			return out, fmt.Errorf("client: waiting for %d of %d jobs: %w", len(ids)-done, len(ids), ctx.Err())
		}
	}
	return out, nil
}

// found is a result for WaitAll, or the error that ends it.
type found struct {
	id  string
	r   job.Result
	err error
}

// waiter is one WaitAll's subscription and look-ups, both sending to found.
type waiter struct {
	c      *Client
	ctx    context.Context // ends with WaitAll
	cancel context.CancelFunc
	want   map[string]bool // the ids waited for; read-only
	found  chan found
	sub    *nats.Subscription
	wg     sync.WaitGroup

	reconnects uint64 // the connection's reconnect count at the start

	mu      sync.Mutex
	pending map[string]bool // the ids not taken yet
}

func (c *Client) startWait(ctx context.Context, ids []string) (*waiter, error) {
	wctx, cancel := context.WithCancel(ctx)
	w := &waiter{c: c, ctx: wctx, cancel: cancel, want: make(map[string]bool, len(ids)),
		pending: make(map[string]bool, len(ids)), found: make(chan found, lookupsInFlight),
		reconnects: c.nc.Stats().Reconnects}
	for _, id := range ids {
		w.want[id], w.pending[id] = true, true
	}
	if err := w.subscribe(); err != nil {
		cancel()
		return nil, err
	}
	w.wg.Add(1)
	go w.lookups(ids)
	return w, nil
}

// take marks id taken; false when it was already.
func (w *waiter) take(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.pending[id] {
		return false
	}
	delete(w.pending, id)
	return true
}

// subscribe subscribes to the tenant's results and makes sure the server
// holds the subscription before any look-up starts.
func (w *waiter) subscribe() error {
	subject := job.ResultSubjects(w.c.tenant)
	before := w.c.nc.LastError()
	sub, err := w.c.nc.Subscribe(subject, w.onResult)
	if err != nil {
		return fmt.Errorf("client: subscribe to %s: %w", subject, err)
	}
	ctx, cancel := w.c.withTimeout(w.ctx)
	defer cancel()
	// A failed flush (reconnecting) is covered by the look-up after the
	// reconnect; only ctx ending is an error.
	_ = w.c.nc.FlushWithContext(ctx)
	err = w.c.denied(before, subject, job.SubjectResultPrefix+w.c.tenant+".")
	if err == nil && w.ctx.Err() != nil {
		err = fmt.Errorf("client: subscribe to %s: %w", subject, w.ctx.Err())
	}
	if err != nil {
		_ = sub.Unsubscribe()
		return err
	}
	w.sub = sub
	return nil
}

// onResult takes a result the subscription delivered.
func (w *waiter) onResult(m *nats.Msg) {
	tenant, id, ok := job.ParseResultSubject(m.Subject)
	if !ok || tenant != w.c.tenant || !w.want[id] {
		return // another job of the tenant
	}
	r, err := decodeResult(tenant, id, m.Data)
	w.send(found{id: id, r: r, err: err})
}

func (w *waiter) send(f found) {
	select {
	case w.found <- f:
	case <-w.ctx.Done():
	}
}

// lookups looks ids up, then looks the pending ones up again after a
// reconnect (results published while the subscription was away are only
// in the stream), after the subscription dropped messages, and when the
// backstop is due. Reading the connection's counters can block while
// nats.go dials a server: this goroutine waits, WaitAll's does not.
func (w *waiter) lookups(ids []string) {
	defer w.wg.Done()
	reconnects := w.c.nc.Stats().Reconnects
	dropped := 0
	next, backoff := time.Now().Add(relookFirst), 2*relookFirst
	w.lookAll(ids, true)
	tick := time.NewTicker(checkEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-w.ctx.Done():
			return
		}
		r := w.c.nc.Stats().Reconnects
		d, _ := w.sub.Dropped()
		if now := time.Now(); r != reconnects || d != dropped || !now.Before(next) {
			reconnects, dropped = r, d
			next, backoff = now.Add(backoff), min(2*backoff, relookMax)
			w.lookAll(w.stillPending(), false)
		}
	}
}

func (w *waiter) stillPending() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.pending))
}

// lookAll looks ids up with lookupsInFlight workers.
func (w *waiter) lookAll(ids []string, first bool) {
	todo := make(chan string)
	var wg sync.WaitGroup
	for range min(lookupsInFlight, len(ids)) {
		wg.Go(func() {
			for id := range todo {
				w.look(id, first)
			}
		})
	}
feed:
	for _, id := range ids {
		select {
		case todo <- id:
		case <-w.ctx.Done():
			break feed
		}
	}
	close(todo)
	wg.Wait()
}

// look reads id's last result. An error that a later look-up may not have
// (a timeout, a reconnect, the stream not back yet after a restart) is
// logged and left to the next look-up; any other ends WaitAll: a missing
// stream on the first look-up (unless the connection was away meanwhile),
// a refused permission, a malformed result.
func (w *waiter) look(id string, first bool) {
	ctx, cancel := context.WithTimeout(w.ctx, w.c.cfg.PublishTimeout)
	defer cancel()
	r, ok, err := w.c.lookup(ctx, id)
	if errors.Is(err, ErrNoStream) && first && !w.reconnected() {
		// A restarted server may answer before nats.go counts the
		// reconnect, and before JetStream has loaded its streams: ask once
		// more, a moment later, before calling the stream missing.
		select {
		case <-time.After(relookFirst):
		case <-w.ctx.Done():
			return
		}
		r, ok, err = w.c.lookup(ctx, id)
	}
	switch {
	case ok:
		w.send(found{id: id, r: r})
	case err == nil || w.ctx.Err() != nil:
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, ErrNoStream) && (!first || w.reconnected()):
		w.c.log.Debug("result look-up failed; looking again later", "job", id, "err", err)
	default:
		w.send(found{err: err})
	}
}

// reconnected tells whether the connection is, or has been, away since the
// start: a "no stream" then may be JetStream not answering yet, not a
// stream that does not exist.
func (w *waiter) reconnected() bool {
	return !w.c.nc.IsConnected() || w.c.nc.Stats().Reconnects != w.reconnects
}

func (w *waiter) stop() {
	w.cancel()
	_ = w.sub.Unsubscribe()
	w.wg.Wait()
}
