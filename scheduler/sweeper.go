package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// SweepStore is the part of *results.Store the Sweeper uses: the terminal
// result, and the task carrying the job (TaskOf).
type SweepStore interface {
	ResultStore
	TaskOf(ctx context.Context, key string) (string, error)
}

// ArchiveInspector is the part of *asynq.Inspector the Sweeper uses.
type ArchiveInspector interface {
	ListArchivedTasks(queue string, opts ...asynq.ListOption) ([]*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

// SweeperConfig configures a Sweeper. A zero field takes its default.
type SweeperConfig struct {
	// Queues to sweep. Default: the default caps' queues.
	Queues []string
	// Interval between passes. Default 30s.
	Interval time.Duration
	// Logger, default slog.Default(); logs with component=sweeper.
	Logger *slog.Logger
	// Now, default time.Now.
	Now func() time.Time
}

// Sweeper gives a terminal result to every job asynq gave up on without
// one. asynq archives a task when its retries are used up outside the
// handler (a worker crashed or lost its lease on every try: the recoverer
// archives it without running it again), or when the handler failed on its
// last try before it could record anything (Redis unreachable). Each pass
// records `infra` for every archived job task that has no result (SET NX:
// a result recorded meanwhile wins) and still carries its job (a rescue
// task <key>#rescue-<run> is mapped back to its job key; an original task
// whose job a rescue carries now is stale and gets no result), and then
// deletes the archived task, so
// a pass costs one list call per queue when nothing was archived. Run one
// next to every scheduler; concurrent sweepers are harmless. It is a
// restartable service.
type Sweeper struct {
	insp  ArchiveInspector
	store SweepStore
	cfg   SweeperConfig
	log   *slog.Logger

	svc startstop.Service
}

// NewSweeper returns a stopped Sweeper.
func NewSweeper(insp ArchiveInspector, store SweepStore, cfg SweeperConfig) (*Sweeper, error) {
	if insp == nil || store == nil {
		return nil, fmt.Errorf("%w: nil ArchiveInspector or store", ErrConfig)
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = job.Caps{}.WithDefaults().Queues
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("%w: negative sweep Interval %s", ErrConfig, cfg.Interval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Sweeper{insp: insp, store: store, cfg: cfg, log: cfg.Logger.With("component", "sweeper")}, nil
}

// Start runs a pass now and then every Interval. Idempotent.
func (s *Sweeper) Start(ctx context.Context) error {
	return s.svc.Start(ctx, startstop.NowAndEvery(s.cfg.Interval, func(ctx context.Context) {
		if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "sweep pass failed; retrying next pass", "err", err, "recorded", n)
		}
	}))
}

// Stop ends the loop and waits for a pass in progress. Idempotent; Start
// may follow.
func (s *Sweeper) Stop() { s.svc.Stop() }

// Sweep runs one pass and returns how many results it recorded.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for _, q := range s.cfg.Queues {
		tasks, err := s.insp.ListArchivedTasks(q, asynq.PageSize(500))
		if errors.Is(err, asynq.ErrQueueNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list archived tasks of %s: %w", q, err))
			continue
		}
		for _, ti := range tasks {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			if ti.Type != job.TaskType {
				continue
			}
			recorded, err := s.settle(ctx, q, ti)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if recorded {
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}

// settle records the infra result of an archived task unless it has a
// result or another task carries its job, then deletes the task.
func (s *Sweeper) settle(ctx context.Context, q string, ti *asynq.TaskInfo) (bool, error) {
	recorded := false
	key := job.TaskKey(ti.ID) // the task id is the job key, or a rescue of it (<key>#rescue-<run>)
	carrier, err := s.store.TaskOf(ctx, key)
	if err != nil {
		return false, fmt.Errorf("read the task of archived job %s: %w", ti.ID, err)
	}
	if carrier != ti.ID {
		// Stale: a rescuer moved the job to another task (its worker died),
		// which runs it or ends it; this one gave up on nothing.
		s.log.InfoContext(ctx, "archived task is stale: another task carries its job", "task", ti.ID, "carrier", carrier)
	} else if _, err := s.store.Get(ctx, key); errors.Is(err, results.ErrNotFound) {
		tenant, id, _ := job.SplitKey(key)
		r := job.Result{ID: id, Tenant: tenant, FinishedAt: s.cfg.Now().UTC(),
			Error: fmt.Sprintf("the queue gave up on the job after %d tries (last error: %s); this is a failure of the fleet (workers crashed or lost Redis while running it), not of the job: check the workers' logs, then submit it again with a new id",
				ti.Retried+1, ti.LastErr)}
		if spec, err := job.Decode(ti.Payload); err == nil {
			r.SubmittedAt, r.Image, r.Queue, r.Labels = spec.SubmittedAt, spec.Image, spec.Queue, spec.Labels
		}
		r.Finish(job.ReasonInfra)
		stored, first, err := s.store.Record(ctx, r)
		if err != nil && !errors.Is(err, results.ErrNotPublished) {
			return false, fmt.Errorf("record result of archived job %s: %w", ti.ID, err)
		}
		if err != nil {
			return false, err // stored; deleting waits until it is published
		}
		recorded = first
		if first {
			s.log.WarnContext(ctx, "job abandoned by the queue; recorded infra", "job", ti.ID, "queue", q, "tries", ti.Retried+1, "last_err", ti.LastErr)
		} else {
			s.log.InfoContext(ctx, "archived job already had a result", "job", ti.ID, "state", stored.State)
		}
	} else if err != nil {
		return false, fmt.Errorf("read result of archived job %s: %w", ti.ID, err)
	}
	if err := s.insp.DeleteTask(q, ti.ID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return recorded, fmt.Errorf("delete archived task %s: %w", ti.ID, err)
	}
	return recorded, nil
}
