package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// Indexer is the part of *results.Store that keeps the job list (the
// index): the scheduler marks each job it enqueues as queued. It is found
// on the Recorder given to New; a Recorder without it (a test's wrapper)
// leaves the index to the results' own writes (running, terminal).
type Indexer interface {
	Queued(ctx context.Context, spec job.Spec, queuedAt time.Time) error
}

// indexQueued marks spec's job queued in the index, when the Recorder keeps
// one. The index is a view: a failure is the Indexer's to log.
func (s *Scheduler) indexQueued(ctx context.Context, spec job.Spec, queuedAt time.Time) {
	if ix, ok := s.store.(Indexer); ok {
		_ = ix.Queued(ctx, spec, queuedAt)
	}
}

// ListStore is the part of *results.Store the Lister uses.
type ListStore interface {
	List(ctx context.Context, q job.ListQuery) (job.ListPage, error)
	Changes(ctx context.Context, tenant string, since time.Time, limit int) ([]job.Summary, error)
}

// ListerConfig configures a Lister. A zero field takes its default.
type ListerConfig struct {
	// Timeout bounds the handling of one request. Default 10s.
	Timeout time.Duration
	// Concurrency bounds the requests answered at once (each is one Redis
	// script; a dashboard's event stream sends two a second). Default 4.
	Concurrency int
	// Logger, default slog.Default(); logs with component=lister.
	Logger *slog.Logger
}

// Lister answers list requests (job.SubjectJobsRequests, queue group
// job.QueueListers) from the job index and the tenants' submissions
// streams (the jobs waiting for a slot; waiting.go): a page of the tenant's jobs
// (job.ListQuery), or the tenant's changes since a time
// (job.ChangesQuery). The tenant is the subject's, which only that tenant
// may publish to (tenant grants): a tenant lists only its own jobs,
// whatever its request says. It is a restartable service.
type Lister struct {
	nc    *nats.Conn
	js    jetstream.JetStream // the tenants' submissions: waiting.go
	store ListStore
	probe IndexProbe // nil: the index only
	cfg   ListerConfig
	log   *slog.Logger

	sem      chan struct{} // one slot per request in progress
	inflight sync.WaitGroup

	mu  sync.Mutex
	sub *nats.Subscription
}

// NewLister returns a stopped Lister.
func NewLister(nc *nats.Conn, store ListStore, cfg ListerConfig) (*Lister, error) {
	if nc == nil || store == nil {
		return nil, fmt.Errorf("%w: nil NATS connection or ListStore", ErrConfig)
	}
	if cfg.Timeout < 0 || cfg.Concurrency < 0 {
		return nil, fmt.Errorf("%w: negative list Timeout (%s) or Concurrency (%d)", ErrConfig, cfg.Timeout, cfg.Concurrency)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("scheduler: lister: %w", err)
	}
	probe, _ := store.(IndexProbe)
	return &Lister{nc: nc, js: js, store: store, probe: probe, cfg: cfg, log: cfg.Logger.With("component", "lister"),
		sem: make(chan struct{}, cfg.Concurrency)}, nil
}

// Start subscribes to list requests. Idempotent.
func (l *Lister) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sub != nil {
		return nil
	}
	// At most Concurrency requests at a time per scheduler (the callback
	// waits for a slot, so NATS buffers the rest); the queue group spreads
	// requests over the schedulers.
	sub, err := l.nc.QueueSubscribe(job.SubjectJobsRequests, job.QueueListers, func(m *nats.Msg) {
		l.sem <- struct{}{}
		l.inflight.Go(func() {
			defer func() { <-l.sem }()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Timeout)
			defer cancel()
			data, _ := json.Marshal(l.handle(rctx, m.Subject, m.Data))
			if err := m.Respond(data); err != nil {
				l.log.WarnContext(ctx, "list reply not sent", "subject", m.Subject, "err", err)
			}
		})
	})
	if err != nil {
		return fmt.Errorf("scheduler: subscribe %s: %w", job.SubjectJobsRequests, err)
	}
	if err := l.nc.FlushTimeout(5 * time.Second); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("scheduler: subscribe %s: %w", job.SubjectJobsRequests, err)
	}
	l.sub = sub
	return nil
}

// Stop stops taking requests and lets those in progress finish (each takes
// at most the request Timeout). Idempotent; Start may follow.
func (l *Lister) Stop() {
	l.mu.Lock()
	sub := l.sub
	l.sub = nil
	l.mu.Unlock()
	if sub == nil {
		return
	}
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
	}
	deadline := time.Now().Add(l.cfg.Timeout)
	for sub.IsValid() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	l.inflight.Wait() // every request has its own deadline
}

// handle answers one request.
func (l *Lister) handle(ctx context.Context, subject string, data []byte) job.ListReply {
	tenant, ok := job.TenantFromJobsSubject(subject)
	if !ok {
		return job.ListReply{Error: "list request on " + subject + ", which names no tenant"}
	}
	var req job.ListRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return job.ListReply{Error: "malformed list request: " + err.Error() + "; send a job.ListRequest as JSON"}
	}
	page, err := l.answer(ctx, tenant, req)
	if err != nil {
		reply := job.ListReply{Error: err.Error()}
		var verr *job.ValidationError
		switch {
		case errors.As(err, &verr):
			reply.Fields = verr.Fields
		case errors.Is(err, results.ErrBadCursor):
			reply.Fields = []job.FieldError{{Field: "cursor", Message: err.Error()}}
		default:
			l.log.WarnContext(ctx, "list failed", "tenant", tenant, "err", err)
		}
		return reply
	}
	return job.ListReply{ListPage: page}
}

// answer runs req for tenant; the tenant of the body is ignored.
func (l *Lister) answer(ctx context.Context, tenant string, req job.ListRequest) (job.ListPage, error) {
	if c := req.Changes; c != nil {
		if c.Limit < 0 || c.Limit > job.MaxListLimit {
			return job.ListPage{}, &job.ValidationError{Fields: []job.FieldError{{Field: "changes.limit", Message: "must be 0 to 200"}}}
		}
		jobs, err := l.store.Changes(ctx, tenant, c.Since, c.Limit)
		if err != nil {
			return job.ListPage{}, err
		}
		jobs, err = l.changedWaiting(ctx, tenant, c.Since, c.Limit, jobs)
		return job.ListPage{Jobs: jobs}, err
	}
	q := req.ListQuery
	q.Tenant = tenant
	return l.listPage(ctx, q) // waiting.go: the waiting jobs, then the index
}
