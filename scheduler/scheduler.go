package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/paddockhq/paddock/internal/retrydelay"

	"github.com/paddockhq/paddock/job"
)

// Enqueuer is the part of *asynq.Client the scheduler uses.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// Recorder is the part of *results.Store the scheduler uses.
type Recorder interface {
	Record(ctx context.Context, r job.Result) (job.Result, bool, error)
	Get(ctx context.Context, id string) (job.Result, error)
	Claim(ctx context.Context, id, owner string) (holder string, ok bool, err error)
	Canceled(ctx context.Context, id string) (bool, error)
}

// Scheduler consumes submissions from JetStream and enqueues them in asynq.
// It is a restartable service: Start and Stop may be called any number of
// times, from any goroutine.
type Scheduler struct {
	js         jetstream.JetStream
	enq        Enqueuer
	store      Recorder
	cfg        Config
	log        *slog.Logger
	warn       *rate.Limiter // rate-limits the per-message failure logs
	suppressed atomic.Int64  // failure logs left out since the last one

	mu  sync.Mutex // serializes Start and Stop; guards run
	run *run
}

// New returns a stopped Scheduler. The stream job.StreamJobs must exist when
// Start is called (results.EnsureStreams).
func New(js jetstream.JetStream, enq Enqueuer, store Recorder, cfg Config) (*Scheduler, error) {
	if js == nil || enq == nil || store == nil {
		return nil, fmt.Errorf("%w: nil JetStream, Enqueuer or Recorder", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Scheduler{
		js: js, enq: enq, store: store, cfg: cfg,
		log:  cfg.Logger.With("component", "scheduler"),
		warn: rate.NewLimiter(rate.Every(5*time.Second), 1),
	}, nil
}

// consumerConfig is the durable pull consumer every scheduler shares.
// MaxDeliver is unlimited on the server: giving up is the scheduler's
// decision, taken only once the job's infra result is recorded (see the
// package doc), so a message is never parked in the stream without a result.
func (s *Scheduler) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.cfg.Consumer,
		Description:   "Paddock schedulers (shared by every scheduler process)",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    -1,
		FilterSubject: job.SubjectSubmit,
	}
}

// messages creates (or updates) the shared consumer and opens a bounded
// iterator on it: at most Concurrency messages are buffered ahead.
func (s *Scheduler) messages(ctx context.Context) (jetstream.MessagesContext, error) {
	cons, err := s.js.CreateOrUpdateConsumer(ctx, job.StreamJobs, s.consumerConfig())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("scheduler: stream %s does not exist (results.EnsureStreams creates it): %w", job.StreamJobs, err)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler: consumer %s on %s: %w", s.cfg.Consumer, job.StreamJobs, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.Concurrency))
	if err != nil {
		return nil, fmt.Errorf("scheduler: consume %s: %w", job.StreamJobs, err)
	}
	return it, nil
}

// Start creates the shared consumer and starts consuming. It returns once
// consuming has started; an error means nothing was started. Starting a
// started Scheduler does nothing. Canceling ctx later stops the Scheduler as
// Stop does (Stop still waits for it).
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		if s.run.ctx.Err() == nil && !s.run.isStopping() {
			return nil
		}
		// Stopped, or being stopped, by its ctx: let it finish, then start
		// afresh.
		s.run.requestStop()
		<-s.run.done
		s.run.release()
		s.run = nil
	}
	it, err := s.messages(ctx)
	if err != nil {
		return err
	}
	hard, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &run{
		s: s, ctx: ctx, iter: it, hard: hard, hardCancel: cancel,
		stopping: make(chan struct{}), done: make(chan struct{}),
	}
	r.stopOnCtx = context.AfterFunc(ctx, r.requestStop)
	go r.loop()
	s.run = r
	s.log.Info("scheduler started", "consumer", s.cfg.Consumer, "concurrency", s.cfg.Concurrency)
	return nil
}

// Stop stops consuming, waits for the messages in flight (at most
// Config.ShutdownTimeout; unfinished ones are left for redelivery) and
// returns. Stopping a stopped Scheduler does nothing.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return
	}
	s.run.requestStop()
	<-s.run.done
	s.run.release()
	s.run = nil
	s.log.Info("scheduler stopped", "consumer", s.cfg.Consumer)
}

// run is one Start..Stop lifetime.
//
// Shutdown order: requestStop drains the iterator (no new pulls; what is
// buffered is still handed out), the reader closes the work channel when
// the iterator is empty, the workers finish their messages and exit. If
// that takes longer than ShutdownTimeout, hard is canceled: Redis calls in
// flight abort and their messages are NAKed for immediate redelivery.
type run struct {
	s          *Scheduler
	ctx        context.Context // Start's: its end stops the run
	hard       context.Context // canceled at the shutdown deadline
	hardCancel context.CancelFunc
	stopOnCtx  func() bool
	stopping   chan struct{}
	stopOnce   sync.Once
	done       chan struct{}

	mu    sync.Mutex // guards iter and timer
	iter  jetstream.MessagesContext
	timer *time.Timer
}

func (r *run) requestStop() {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		close(r.stopping)
		r.timer = time.AfterFunc(r.s.cfg.ShutdownTimeout, r.hardCancel)
		if r.iter != nil {
			r.iter.Drain()
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
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range r.s.cfg.Concurrency {
		wg.Go(func() {
			for msg := range work {
				r.s.handle(r.hard, msg)
			}
		})
	}
	r.read(work)
	close(work)
	wg.Wait()
	r.mu.Lock()
	if r.iter != nil {
		r.iter.Stop()
	}
	r.mu.Unlock()
}

// read hands messages to the workers until the run stops. A failed iterator
// (consumer deleted, connection lost, missed heartbeats) is replaced, with a
// backoff, by a new one on a re-created consumer.
func (r *run) read(work chan<- jetstream.Msg) {
	retry := retrydelay.New(r.s.cfg.BackoffMin, r.s.cfg.BackoffMax, 0.2)
	for {
		r.mu.Lock()
		it := r.iter
		r.mu.Unlock()
		if it == nil {
			if !r.sleep(retry.NextBackOff()) {
				return
			}
			next, err := r.s.messages(r.hard)
			if err != nil {
				r.s.warnf("scheduler: cannot consume; retrying", "err", err)
				continue
			}
			r.mu.Lock()
			if r.isStopping() {
				r.mu.Unlock()
				next.Stop()
				return
			}
			r.iter, it = next, next
			r.mu.Unlock()
		}
		msg, err := it.Next(jetstream.NextContext(r.hard))
		if err == nil {
			retry.Reset() // the next failure waits BackoffMin again
			select {
			case work <- msg:
			case <-r.hard.Done():
				_ = msg.Nak()
				return
			}
			continue
		}
		if r.isStopping() {
			return // drained, or out of time
		}
		r.s.warnf("scheduler: message iterator failed; re-creating it", "err", err)
		it.Stop()
		r.mu.Lock()
		r.iter = nil
		r.mu.Unlock()
	}
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
