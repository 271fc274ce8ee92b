package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// Enqueuer is the part of *asynq.Client the scheduler uses.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// Recorder is what New takes: *results.Store, or any value with the
// narrow interfaces each part of the scheduler declares beside its use.
// The scheduler keeps one field per interface, so each part reaches only
// its own concern.
type Recorder interface {
	ResultStore // the terminal result (here; handle.go, sweeper.go, cancel.go)
	Claimer     // the id claim (handle.go)
	CancelFlags // the cancel flag (handle.go)
	Admitter    // the tenants' rate window (tenants.go)
	Settled     // which held jobs have a result (hold.go)
}

// ResultStore is the part of *results.Store that keeps a job's terminal
// result: Record (first writer wins) and Get (results.ErrNotFound when
// there is none).
type ResultStore interface {
	Record(ctx context.Context, r job.Result) (job.Result, bool, error)
	Get(ctx context.Context, key string) (job.Result, error)
}

// Scheduler consumes submissions from JetStream and enqueues them in asynq.
// It is a restartable service: Start and Stop may be called any number of
// times, from any goroutine.
type Scheduler struct {
	js         jetstream.JetStream
	enq        Enqueuer
	store      Recorder    // as given to New (list.go looks for an Indexer on it)
	results    ResultStore // the fields below are store, each by its concern
	claims     Claimer
	flags      CancelFlags
	admit      Admitter
	settled    Settled
	cfg        Config
	log        *slog.Logger
	warn       *rate.Limiter // rate-limits the per-message failure logs
	suppressed atomic.Int64  // failure logs left out since the last one

	qmu    sync.RWMutex
	quotas map[string]Quota // the tenants as last seen

	inBuckets sync.Map // tenant → its input bucket (stores.go)

	mu  sync.Mutex // serializes Start and Stop; guards run
	run *run
}

// New returns a stopped Scheduler. It consumes the stream of every tenant
// Config.Tenants names, creating the stream when it is missing; the results
// stream must exist (results.EnsureStreams).
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
		results: store, claims: store, flags: store, admit: store, settled: store,
		log:    cfg.Logger.With("component", "scheduler"),
		warn:   rate.NewLimiter(rate.Every(5*time.Second), 1),
		quotas: map[string]Quota{},
	}, nil
}

// consumerConfig is the durable pull consumer every scheduler shares on
// the tenant's stream. MaxDeliver is unlimited on the server: giving up is
// the scheduler's decision, taken only once the job's infra result is
// recorded (see the package doc), so a message is never parked in the
// stream without a result. MaxAckPending is the tenant's max-running: a
// message is held, unacknowledged, until its job has a result (hold.go).
func (s *Scheduler) consumerConfig(q Quota) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.cfg.Consumer,
		Description:   "Paddock schedulers (shared by every scheduler process)",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: s.maxRunning(q),
		FilterSubject: job.SubmitSubject(q.Tenant),
	}
}

func (s *Scheduler) maxRunning(q Quota) int {
	if q.MaxRunning > 0 {
		return q.MaxRunning
	}
	return s.cfg.MaxRunning
}

// messages makes sure the tenant's stream and the shared consumer exist
// with the tenant's quotas, and opens a bounded iterator on the consumer:
// at most Concurrency messages are buffered ahead.
func (s *Scheduler) messages(ctx context.Context, q Quota) (jetstream.MessagesContext, error) {
	stream := job.JobsStream(q.Tenant)
	if err := results.EnsureTenant(ctx, s.js, s.cfg.Streams, q.Tenant, q.MaxQueued, q.MaxStored); err != nil {
		return nil, fmt.Errorf("scheduler: tenant %s: %w", q.Tenant, err)
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, stream, s.consumerConfig(q))
	if err != nil {
		return nil, fmt.Errorf("scheduler: consumer %s on %s: %w", s.cfg.Consumer, stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(min(s.cfg.Concurrency, s.maxRunning(q))))
	if err != nil {
		return nil, fmt.Errorf("scheduler: consume %s: %w", stream, err)
	}
	return it, nil
}

// Start consumes the current tenants' streams, and follows Config.Tenants
// as tenants come and go. It returns once consuming has started; an error
// means nothing was started. Starting a started Scheduler does nothing.
// Canceling ctx later stops the Scheduler as Stop does (Stop still waits
// for it).
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
	r, err := s.newRun(ctx)
	if err != nil {
		return err
	}
	go r.loop()
	s.run = r
	s.log.Info("scheduler started", "consumer", s.cfg.Consumer, "concurrency", s.cfg.Concurrency, "tenants", r.tenantCount())
	return nil
}

// Stop stops consuming, waits for the messages in flight (at most
// Config.ShutdownTimeout; unfinished ones are left for redelivery) and
// returns. Held messages are left unacknowledged: another scheduler takes
// them after AckWait. Stopping a stopped Scheduler does nothing.
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

// Held is the number of messages this scheduler holds now: jobs in the
// queue or running, acknowledged when they have a result (hold.go).
func (s *Scheduler) Held() int {
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	if r == nil {
		return 0
	}
	return r.holds.held()
}
