package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/internal/retrydelay"
	"github.com/paddockhq/paddock/job"
)

// run is one Start..Stop lifetime: one reader per tenant, the workers that
// process what the readers hand out, and the holds of enqueued jobs.
//
// Shutdown order: requestStop drains every reader's iterator (no new
// pulls; what is buffered is still handed out), each reader returns when
// its iterator is empty, then the work channel closes and the workers
// finish their messages. If that takes longer than ShutdownTimeout, hard
// is canceled: Redis calls in flight abort and their messages are NAKed
// for immediate redelivery. Held messages are left unacknowledged.
type run struct {
	s          *Scheduler
	ctx        context.Context // Start's: its end stops the run
	hard       context.Context // canceled at the shutdown deadline
	hardCancel context.CancelFunc
	stopOnCtx  func() bool
	stopping   chan struct{}
	stopOnce   sync.Once
	done       chan struct{}
	work       chan jetstream.Msg
	holds      *holds

	mu      sync.Mutex // guards readers and timer
	readers map[string]*reader
	readWG  sync.WaitGroup
	timer   *time.Timer
}

// newRun subscribes to results (for the holds) and starts a reader for
// every current tenant; the first error undoes it all.
func (s *Scheduler) newRun(ctx context.Context) (*run, error) {
	if _, err := s.js.Stream(ctx, job.ResultsStream(job.DefaultTenant)); err != nil {
		return nil, fmt.Errorf("scheduler: stream %s: %w (results.EnsureStreams creates it)", job.ResultsStream(job.DefaultTenant), err)
	}
	hard, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &run{
		s: s, ctx: ctx, hard: hard, hardCancel: cancel,
		stopping: make(chan struct{}), done: make(chan struct{}),
		work: make(chan jetstream.Msg), readers: map[string]*reader{},
	}
	var err error
	if r.holds, err = newHolds(s); err != nil {
		cancel()
		return nil, err
	}
	var initial []error
	started := false
	werr := s.cfg.Tenants.Watch(hard, func(q Quota, deleted bool) {
		if err := r.onTenant(q, deleted); err != nil {
			if !started {
				initial = append(initial, err)
				return
			}
			s.warnf("scheduler: tenant change not applied; it is retried at the next start", "tenant", q.Tenant, "err", err)
		}
	})
	started = true
	if err := errors.Join(append(initial, werr)...); err != nil {
		r.requestStop()
		r.readWG.Wait()
		r.holds.stop()
		cancel()
		return nil, err
	}
	r.stopOnCtx = context.AfterFunc(ctx, r.requestStop)
	return r, nil
}

// onTenant starts, updates or stops the tenant's reader.
func (r *run) onTenant(q Quota, deleted bool) error {
	s := r.s
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.isStopping() {
		return nil
	}
	old, running := r.readers[q.Tenant]
	if deleted {
		s.qmu.Lock()
		delete(s.quotas, q.Tenant)
		s.qmu.Unlock()
		if running {
			old.iter.Stop()
			delete(r.readers, q.Tenant)
		}
		return nil
	}
	it, err := s.messages(r.hard, q)
	if err != nil {
		return err
	}
	s.qmu.Lock()
	s.quotas[q.Tenant] = q
	s.qmu.Unlock()
	if running {
		// The new iterator, on the updated consumer, replaces it; Drain
		// lets the old reader hand out what it has buffered first (Stop
		// would leave those messages for redelivery after AckWait).
		old.iter.Drain()
	}
	rd := &reader{run: r, quota: q, iter: it}
	r.readers[q.Tenant] = rd
	r.readWG.Go(rd.read)
	return nil
}

func (r *run) tenantCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.readers)
}

func (r *run) requestStop() {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		close(r.stopping)
		r.timer = time.AfterFunc(r.s.cfg.ShutdownTimeout, r.hardCancel)
		for _, rd := range r.readers {
			rd.iter.Drain()
		}
	})
}

func (r *run) isStopping() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// release frees what outlives loop: the ctx hook and the shutdown timer.
func (r *run) release() {
	r.stopOnCtx()
	r.mu.Lock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	r.hardCancel()
}

func (r *run) loop() {
	defer close(r.done)
	var wg sync.WaitGroup
	for range r.s.cfg.Concurrency {
		wg.Go(func() {
			for msg := range r.work {
				r.s.handle(r.hard, msg, r.holds)
			}
		})
	}
	<-r.stopping
	r.readWG.Wait()
	close(r.work)
	wg.Wait()
	r.mu.Lock()
	for _, rd := range r.readers {
		rd.iter.Stop()
	}
	r.mu.Unlock()
	r.holds.stop()
}

// sleep waits d unless the run stops first.
func (r *run) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stopping:
		return false
	}
}

// reader hands one tenant's messages to the workers, each after taking a
// slot (hold.go), until its iterator is stopped or drained.
type reader struct {
	run   *run
	quota Quota

	mu   sync.Mutex // guards iter after a failure
	iter jetstream.MessagesContext
}

// read is the reader's loop. A failed iterator (consumer deleted,
// connection lost, missed heartbeats) is replaced, with a backoff, by a new
// one on a re-created consumer.
func (rd *reader) read() {
	r := rd.run
	retry := retrydelay.New(r.s.cfg.BackoffMin, r.s.cfg.BackoffMax, 0.2)
	it := rd.iter
	for {
		msg, err := it.Next(jetstream.NextContext(r.hard))
		if err == nil {
			retry.Reset() // the next failure waits BackoffMin again
			if !rd.handOut(msg) {
				return
			}
			continue
		}
		if r.isStopping() || errors.Is(err, jetstream.ErrMsgIteratorClosed) && rd.replaced(it) {
			return // drained, out of time, or this tenant's reader was replaced
		}
		r.s.warnf("scheduler: message iterator failed; re-creating it", "tenant", rd.quota.Tenant, "err", err)
		it.Stop()
		if it = rd.reopen(retry); it == nil {
			return
		}
	}
}

// handOut takes a slot and gives msg to a worker; false: the run stops.
func (rd *reader) handOut(msg jetstream.Msg) bool {
	r := rd.run
	if !r.holds.acquire(r.stopping) {
		_ = msg.Nak() // shutting down: another scheduler takes it now
		return false
	}
	select {
	case r.work <- msg:
		return true
	case <-r.hard.Done():
		r.holds.release()
		_ = msg.Nak()
		return false
	}
}

// replaced reports whether it is no longer the tenant's iterator (the
// tenant was updated or deleted).
func (rd *reader) replaced(it jetstream.MessagesContext) bool {
	r := rd.run
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.readers[rd.quota.Tenant]
	return !ok || cur != rd || rd.iterNow() != it
}

func (rd *reader) iterNow() jetstream.MessagesContext {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.iter
}

// reopen re-creates the consumer and its iterator after a backoff; nil
// when the run stops first.
func (rd *reader) reopen(retry interface{ NextBackOff() time.Duration }) jetstream.MessagesContext {
	r := rd.run
	for {
		if !r.sleep(retry.NextBackOff()) {
			return nil
		}
		next, err := r.s.messages(r.hard, rd.quota)
		if err != nil {
			r.s.warnf("scheduler: cannot consume; retrying", "tenant", rd.quota.Tenant, "err", err)
			continue
		}
		r.mu.Lock()
		if r.isStopping() || r.readers[rd.quota.Tenant] != rd {
			r.mu.Unlock()
			next.Stop()
			return nil
		}
		rd.mu.Lock()
		rd.iter = next
		rd.mu.Unlock()
		r.mu.Unlock()
		return next
	}
}
