package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/telemetry"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
)

// ErrConfig is wrapped by every invalid Config.
var ErrConfig = errors.New("worker: invalid config")

// Store is what the worker needs of results.Store.
type Store interface {
	Record(ctx context.Context, r job.Result) (job.Result, bool, error)
	Get(ctx context.Context, id string) (job.Result, error)
	BeginRun(ctx context.Context, id string) (int, error)
	Canceled(ctx context.Context, id string) (bool, error)
}

// VolumeGuard takes a shared volume for a job (locks.Guard).
type VolumeGuard interface {
	Acquire(ctx context.Context, name string, mode locks.Mode) (*locks.Held, error)
}

// errLeaseLost is the cancel cause when a job's volume lease is lost.
var errLeaseLost = errors.New("worker: volume lease lost")

// Config configures a Worker. Zero fields take defaults.
type Config struct {
	// ID names this worker (container owner label, heartbeat key). Default
	// hostname-pid; it must match the sandbox Runtime's Owner.
	ID string
	// Caps re-validate every spec taken from the queue.
	Caps job.Caps
	// Concurrency is the number of jobs run at once (default 4).
	Concurrency int
	// Queues maps queue names to weights (default {"default": 1}).
	Queues map[string]int
	// StrictPriority drains higher-weight queues first.
	StrictPriority bool
	// TaskCheckInterval is how often an idle worker polls Redis (default
	// 100 ms; asynq's 1 s default adds up to a second to an idle fleet).
	TaskCheckInterval time.Duration
	// ShutdownTimeout is the drain grace on Stop (default 30 s): running
	// jobs may finish within it; then their containers are killed and
	// their tasks re-queued.
	ShutdownTimeout time.Duration
	// HeartbeatTTL of the worker's liveness key (default 30 s).
	HeartbeatTTL time.Duration
	// KeyPrefix of Paddock's Redis keys (default "paddock:").
	KeyPrefix string
	// Volumes guards shared volumes (nil: jobs may not request one).
	Volumes VolumeGuard
	// SkipSelfTest skips the start-up sandbox self-test (tests only).
	SkipSelfTest bool
	// Healer runs each job's command under the self-healing loop (default:
	// healer.New with the healer's defaults: rules mode, no LLM, no memo).
	Healer Healer
	// Metrics (optional) records jobs, queue wait, run time, pool and lease
	// metrics; TracerProvider and MeterProvider default to the globals.
	Metrics        *telemetry.Metrics
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Now is the clock (tests).
	Now    func() time.Time
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.ID == "" {
		h, _ := os.Hostname()
		c.ID = h + "-" + strconv.Itoa(os.Getpid())
	}
	c.Caps.Volumes = c.Volumes != nil
	c.Caps = c.Caps.WithDefaults()
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if len(c.Queues) == 0 {
		c.Queues = map[string]int{}
		for i, q := range c.Caps.Queues {
			c.Queues[q] = len(c.Caps.Queues) - i
		}
	}
	if c.TaskCheckInterval == 0 {
		c.TaskCheckInterval = 100 * time.Millisecond
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.HeartbeatTTL == 0 {
		c.HeartbeatTTL = 30 * time.Second
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "paddock:"
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Logger = c.Logger.With("component", "worker", "worker", c.ID)
	if c.Healer == nil {
		h, err := healer.New(healer.Config{Logger: c.Logger, Tracer: c.TracerProvider.Tracer("github.com/paddockhq/paddock/healer"),
			SpanAttributes: SandboxSpanAttributes, Metrics: healer.Metrics{Heal: c.Metrics.HealAttempt}})
		if err != nil {
			return c, err
		}
		c.Healer = h
	}
	if c.Concurrency < 0 {
		return c, fmt.Errorf("%w: concurrency %d", ErrConfig, c.Concurrency)
	}
	for q, w := range c.Queues {
		if w <= 0 {
			return c, fmt.Errorf("%w: queue %q has weight %d; weights must be > 0", ErrConfig, q, w)
		}
	}
	return c, nil
}

// Worker runs jobs from asynq in sandbox sessions.
type Worker struct {
	rdb     redis.UniversalClient
	rt      *sandbox.Runtime
	store   Store
	cfg     Config
	hb      *Heartbeat
	reap    *sandbox.Reaper
	log     *slog.Logger
	tr      trace.Tracer
	m       *telemetry.Metrics
	poolReg metric.Registration

	mu      sync.Mutex
	srv     *asynq.Server
	running bool
	drain   drainer // running handlers; cuts them at the end of the grace (drain.go)
}

// New returns a Worker over rdb (asynq and heartbeats), rt (the sandbox
// runtime; the worker starts and stops it) and store (results).
func New(rdb redis.UniversalClient, rt *sandbox.Runtime, store Store, cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if rt.Owner() != cfg.ID {
		return nil, fmt.Errorf("%w: worker id %q differs from the sandbox owner %q", ErrConfig, cfg.ID, rt.Owner())
	}
	w := &Worker{rdb: rdb, rt: rt, store: store, cfg: cfg, log: cfg.Logger, m: cfg.Metrics,
		tr: cfg.TracerProvider.Tracer("github.com/paddockhq/paddock/worker")}
	w.hb = NewHeartbeat(rdb, cfg.ID, cfg.KeyPrefix, cfg.HeartbeatTTL)
	w.reap = sandbox.NewReaper(rt, w.hb)
	w.reap.OnReap = func(n int) { w.m.ContainersReaped(context.Background(), n) }
	return w, nil
}

// DefaultProfile is the sandbox profile of a job that asks for no limits:
// it is kept warm from the start.
func (w *Worker) DefaultProfile() sandbox.Profile {
	c := w.cfg.Caps
	return sandbox.Profile{Image: c.Images[0], MemoryMB: c.DefaultMemoryMB, CPUs: c.DefaultCPUs,
		Pids: c.DefaultPids, TmpfsMB: c.DefaultTmpfsMB}
}

// Start brings the worker up in dependency order: sandbox runtime (warm
// pool), self-test (refuse to start when a limit does not apply), heartbeat,
// reaper, then intake from the queue. Idempotent.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return nil
	}
	if err := w.rt.Start(ctx, w.DefaultProfile()); err != nil {
		return err
	}
	if !w.cfg.SkipSelfTest {
		// Every image a job may name: a limit that holds for one image's
		// init may not for another's.
		for _, img := range w.cfg.Caps.Images {
			t0 := time.Now()
			p := w.DefaultProfile()
			p.Image = img
			if err := w.rt.SelfTest(ctx, p); err != nil {
				w.rt.Stop()
				return err
			}
			w.log.Info("sandbox self-test passed", "image", img, "took", time.Since(t0).Round(time.Millisecond))
		}
	}
	if err := w.hb.Start(ctx); err != nil {
		w.rt.Stop()
		return fmt.Errorf("worker: heartbeat: %w", err)
	}
	_ = w.reap.Start(ctx)
	srv := asynq.NewServerFromRedisClient(w.rdb, asynq.Config{
		Concurrency:       w.cfg.Concurrency,
		Queues:            w.cfg.Queues,
		StrictPriority:    w.cfg.StrictPriority,
		TaskCheckInterval: w.cfg.TaskCheckInterval,
		ShutdownTimeout:   w.cfg.ShutdownTimeout + drainKillMargin, // see drain.go
		RetryDelayFunc:    retryDelay,
		Logger:            asynqLogger{w.log.With("component", "asynq")},
		LogLevel:          asynq.WarnLevel,

		// Delayed jobs and queue retries become runnable within 1 s of
		// their time (asynq's default 5 s); ~6 Redis scripts/s per idle
		// worker with three queues. docs/scheduling.md.
		DelayedTaskCheckInterval: time.Second,
	})
	mux := asynq.NewServeMux()
	mux.Use(telemetry.AsynqMiddleware(telemetry.WithTracerProvider(w.cfg.TracerProvider), telemetry.WithMeterProvider(w.cfg.MeterProvider)))
	mux.Use(w.drainable, w.watchCancel) // drain.go, cancel.go
	w.drain.reset()
	mux.HandleFunc(job.TaskType, w.ProcessTask)
	if w.m != nil && w.poolReg == nil {
		w.poolReg, _ = w.m.RegisterPoolSize(func() int64 { return int64(w.rt.PoolSize()) })
	}
	if err := srv.Start(mux); err != nil {
		w.reap.Stop()
		w.hb.Stop()
		w.rt.Stop()
		return fmt.Errorf("worker: start asynq server: %w", err)
	}
	w.srv, w.running = srv, true
	return nil
}

// Stop shuts down in dependency order: stop claiming tasks and let running
// jobs finish within ShutdownTimeout (then their contexts end, their
// containers are destroyed and asynq re-queues them), stop the reaper and
// the heartbeat, then destroy the warm pool. Idempotent.
func (w *Worker) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running {
		return
	}
	w.running = false
	w.drain.begin(w.cfg.ShutdownTimeout)
	w.srv.Shutdown()
	// asynq does not wait for a handler it re-queued: wait until every
	// handler has destroyed its container before stopping the runtime.
	if !w.drain.wait(drainKillMargin + 20*time.Second) {
		w.log.Error("jobs still running after the drain; their containers are removed with the runtime")
	}
	w.reap.Stop()
	w.hb.Stop()
	w.rt.Stop()
	if w.poolReg != nil {
		_ = w.poolReg.Unregister()
		w.poolReg = nil
	}
}

// retryDelay backs off infrastructure retries: 1 s, 2 s, 4 s … capped at 30 s.
func retryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	return min(time.Duration(1<<min(n, 5))*time.Second, 30*time.Second)
}

// ProcessTask is the asynq handler of job.TaskType.
func (w *Worker) ProcessTask(ctx context.Context, t *asynq.Task) error {
	started := w.cfg.Now()
	taskID, _ := asynq.GetTaskID(ctx)
	log := w.log.With("job", taskID)
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(telemetry.AttrJobID.String(taskID))

	spec, err := job.Decode(t.Payload())
	if err == nil && spec.ID != "" && spec.ID != taskID {
		err = fmt.Errorf("%w: payload id %q differs from task id %q", job.ErrInvalid, spec.ID, taskID)
	}
	var eff job.Effective
	if err == nil {
		eff, err = job.Validate(&spec, w.cfg.Caps)
	}
	if err != nil {
		res := job.Result{ID: taskID, Error: "rejected by the worker: " + err.Error(), Errors: job.FieldErrors(err), FinishedAt: w.cfg.Now()}
		res.Finish(job.ReasonRejected)
		return w.record(ctx, log, res)
	}
	job.Normalize(&spec, w.cfg.Caps)
	id := taskID

	// A job that already ended (re-delivery after a crash, a duplicate)
	// is not run again; its result is published again in case the crash
	// came between the Redis write and the publish.
	if prev, err := w.store.Get(ctx, id); err == nil {
		dctx, cancel := detached(ctx)
		defer cancel()
		_, _, err := w.store.Record(dctx, prev)
		if errors.Is(err, results.ErrNotPublished) {
			return err // retry the publish later
		}
		return err
	} else if !errors.Is(err, results.ErrNotFound) {
		return fmt.Errorf("worker: read result of %s: %w", id, err)
	}
	res := job.Result{
		ID: id, Image: spec.Image, Queue: spec.Queue, Labels: spec.Labels, Limits: &eff,
		SubmittedAt: spec.SubmittedAt, QueuedAt: queuedAt(t), StartedAt: started, Worker: w.cfg.ID,
	}
	if canceled, err := w.store.Canceled(ctx, id); err != nil {
		return fmt.Errorf("worker: read cancel flag of %s: %w", id, err)
	} else if canceled {
		res.Error = "canceled before it started"
		res.FinishedAt = w.cfg.Now()
		res.Finish(job.ReasonCanceled)
		return w.record(ctx, log, res)
	}
	run, err := w.store.BeginRun(ctx, id)
	if err != nil {
		return fmt.Errorf("worker: begin run of %s: %w", id, err)
	}
	res.Runs = run
	if !res.QueuedAt.IsZero() {
		w.m.QueueWait(ctx, spec.Queue, started.Sub(res.QueuedAt))
	}
	span.SetAttributes(telemetry.AttrQueue.String(spec.Queue), attribute.Int("paddock.run", run))

	profile := sandbox.Profile{Image: spec.Image, MemoryMB: eff.MemoryMB, CPUs: eff.CPUs, Pids: eff.Pids, TmpfsMB: eff.TmpfsMB}
	env := jobEnv(spec, id)

	// A shared volume: lease, then flock, then mount. A lost lease ends the
	// run as lease_lost; the container is destroyed (synchronously) before
	// the lock is released, so no two jobs ever write the volume at once.
	if spec.Volume != nil {
		if w.cfg.Volumes == nil {
			res.Error = "this worker has no volume root; the job asked for volume " + spec.Volume.Name
			res.FinishedAt = w.cfg.Now()
			res.Finish(job.ReasonRejected)
			return w.record(ctx, log, res)
		}
		mode := locks.RW
		if spec.Volume.Mode == job.VolumeRO {
			mode = locks.RO
		}
		lctx, lspan := w.tr.Start(ctx, "paddock.lock.wait", trace.WithAttributes(
			attribute.String("paddock.volume", spec.Volume.Name), attribute.String("paddock.volume.mode", mode.String())))
		held, err := w.cfg.Volumes.Acquire(lctx, spec.Volume.Name, mode)
		endSpan(lspan, err)
		if held != nil {
			w.m.LeaseWait(ctx, held.Waited(), true)
		} else {
			w.m.LeaseWait(ctx, 0, false)
		}
		if err != nil {
			if locks.Retryable(err) {
				err = &sandbox.InfraError{Op: "lock volume " + spec.Volume.Name, Err: err, Retryable: true}
			}
			return w.infraFail(ctx, log, res, err)
		}
		defer held.Release()
		res.LockWaitMS = held.Waited().Milliseconds()
		profile.Mounts = []sandbox.Mount{{Source: held.Dir(), Target: sandbox.WorkspaceDir, ReadOnly: mode == locks.RO}}
		if mode == locks.RW {
			res.FencingToken = held.FencingToken()
			env[job.EnvFencingToken] = strconv.FormatInt(held.FencingToken(), 10)
			var cancel context.CancelCauseFunc
			ctx, cancel = context.WithCancelCause(ctx)
			defer cancel(nil)
			go func() {
				select {
				case <-held.Lost():
					log.Warn("volume lease lost; killing the job", "volume", spec.Volume.Name, "err", held.Err())
					w.m.LeaseLost(context.WithoutCancel(ctx))
					cancel(errLeaseLost)
				case <-ctx.Done():
				}
			}()
		}
	}

	if tp := telemetry.TraceParent(ctx); tp != "" {
		env["TRACEPARENT"] = tp
	}
	actx, aspan := w.tr.Start(ctx, "paddock.sandbox.acquire", trace.WithAttributes(attribute.String("container.image.name", spec.Image)))
	sess, err := w.rt.Acquire(actx, profile, sandbox.SessionOptions{
		Deadline: started.Add(eff.JobTimeout),
		Labels:   map[string]string{sandbox.LabelJob: id, sandbox.LabelAttempt: strconv.Itoa(run)},
		Env:      env,
	})
	endSpan(aspan, err)
	if err != nil {
		return w.infraFail(ctx, log, res, err)
	}
	aspan.SetAttributes(attribute.Bool("paddock.pool.hit", sess.Pooled), attribute.String("container.name", sess.ContainerName()))
	if sess.Pooled {
		w.m.PoolHit(ctx)
	} else {
		w.m.PoolColdStart(ctx)
	}
	if spec.Volume != nil {
		// Deferred calls run last-in first-out: this runs before Release.
		defer func() {
			dctx, cancel := detached(ctx)
			defer cancel()
			if err := sess.Destroy(dctx); err != nil {
				log.Error("could not confirm the container is gone before releasing the volume", "err", err)
			}
		}()
	} else {
		defer sess.Close()
	}
	log.Debug("session", "container", sess.ContainerName(), "pooled", sess.Pooled)

	trace.SpanFromContext(ctx).SetAttributes(
		attribute.Int64("paddock.limits.memory_mb", eff.MemoryMB), attribute.Float64("paddock.limits.cpus", eff.CPUs),
		attribute.Int64("paddock.limits.pids", eff.Pids), attribute.Int64("paddock.limits.command_timeout_s", int64(eff.CommandTimeout/time.Second)))
	var policy job.HealPolicy
	if spec.Heal != nil {
		policy = *spec.Heal
	}
	// The job budget: the healer fits its commands, installs and LLM calls
	// into it, so the sandbox (not this context) ends a command at the deadline.
	hctx, hcancel := context.WithDeadline(ctx, started.Add(eff.JobTimeout))
	defer hcancel()
	hres, err := w.cfg.Healer.Run(hctx, &sessionExec{sess: sess, dir: spec.Workdir, outputBytes: eff.OutputBytes},
		spec, policy, eff.CommandTimeout)
	res.Attempts = hres.Attempts
	out, _ := hres.Final.Detail.(sandbox.Outcome)
	jobDeadline := err != nil && ctx.Err() == nil &&
		(errors.Is(err, sandbox.ErrSessionBroken) && out.Reason == sandbox.ReasonTimeout || errors.Is(err, context.DeadlineExceeded))
	// The job's own processes ended its sandbox (init killed under a limit
	// the job hit): the job's failure, with the outcome's reason, once.
	jobEnded := err != nil && ctx.Err() == nil && errors.Is(err, sandbox.ErrSandboxEnded)
	switch {
	case err == nil, jobDeadline, jobEnded:
		// The command ended (a job-deadline kill is the job's timeout).
	case errors.Is(context.Cause(ctx), errLeaseLost):
		res.Error = "the volume's lease was lost while the job ran (Redis unreachable or the lease taken over); its container was killed so it cannot write stale data"
		markLast(&res, job.ReasonLeaseLost)
		res.FinishedAt = w.cfg.Now()
		res.Finish(job.ReasonLeaseLost)
		return w.record(ctx, log, res)
	case ctx.Err() != nil:
		// Canceled by the user, or the worker is shutting down / lost the
		// task's lease: confirm the container is gone before returning, so
		// that a re-run never overlaps this one.
		dctx, cancel := detached(ctx)
		defer cancel()
		if err := sess.Destroy(dctx); err != nil {
			log.Error("could not confirm the interrupted job's container is gone", "err", err)
		}
		if c, _ := w.store.Canceled(dctx, id); c {
			res.Error = "canceled while running; its container was killed"
			markLast(&res, job.ReasonCanceled)
			res.FinishedAt = w.cfg.Now()
			res.Finish(job.ReasonCanceled)
			return w.record(ctx, log, res)
		}
		log.Warn("job interrupted; the queue will run it again", "cause", context.Cause(ctx))
		return fmt.Errorf("worker: job %s interrupted: %w", id, context.Cause(ctx))
	default:
		return w.infraFail(ctx, log, res, err)
	}
	reason, code := hres.Reason, hres.Final.ExitCode
	if jobDeadline {
		reason, code = job.ReasonTimeout, -1
		markLast(&res, job.ReasonTimeout)
	}
	res.ExitCode = &code
	res.Stdout, res.Stderr = toOutput(out.Stdout), toOutput(out.Stderr)
	res.FinishedAt = w.cfg.Now()
	res.Finish(reason)
	res.Error = explain(reason, out, eff, jobDeadline)
	if out.Ended != "" {
		res.Error = out.Ended + "; " + res.Error
	}
	return w.record(ctx, log, res)
}

// explain says what happened to a failed command and what to do about it.
func explain(r job.Reason, out sandbox.Outcome, eff job.Effective, jobDeadline bool) string {
	switch r {
	case job.ReasonTimeout:
		if jobDeadline {
			return fmt.Sprintf("killed at the job timeout of %s (the container was destroyed); raise limits.job_timeout_s or split the work", eff.JobTimeout)
		}
		return fmt.Sprintf("killed after the %s timeout (every process of the command was killed); raise limits.command_timeout_s or make the command finish sooner", eff.CommandTimeout)
	case job.ReasonOOM:
		return fmt.Sprintf("the kernel's OOM killer killed a process (%d kill(s)): the job needed more than its %d MiB memory limit; use less memory or raise limits.memory_mb", out.OOMKills, eff.MemoryMB)
	case job.ReasonPidsLimit:
		return fmt.Sprintf("the job reached its limit of %d processes (a fork was refused) and every process was killed; a fork bomb ends here, a real workload can raise limits.pids", eff.Pids)
	case job.ReasonOutputCap:
		return "the command printed more output than the worker accepts and was killed; write large output to a file under /workspace instead of stdout"
	case job.ReasonFsize:
		return "a file grew past the sandbox's file-size limit (SIGXFSZ); write less, or ask the operator for a larger fsize limit"
	case job.ReasonSignal:
		return fmt.Sprintf("the command was killed by signal %d", out.Signal)
	}
	return ""
}

// infraFail retries a retryable sandbox failure through the queue while
// retries remain; then the job ends as infra with what to do.
func (w *Worker) infraFail(ctx context.Context, log *slog.Logger, res job.Result, cause error) error {
	retry, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	if errors.Is(context.Cause(ctx), errLeaseLost) {
		// Lost while the sandbox was starting: the job never ran, but it
		// must not run again under a lease someone else now holds.
		res.Error = "the volume's lease was lost before the job could start (Redis unreachable or the lease taken over); it did not run"
		res.FinishedAt = w.cfg.Now()
		res.Finish(job.ReasonLeaseLost)
		return w.record(ctx, log, res)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("worker: job %s interrupted: %w", res.ID, context.Cause(ctx))
	}
	if sandbox.IsRetryable(cause) && retry < maxRetry {
		log.Warn("infrastructure failure; the queue will retry", "err", cause, "retry", retry, "max_retry", maxRetry)
		return cause
	}
	res.Error = fmt.Sprintf("%v (after %d of %d tries; this is a failure of the worker's infrastructure, not of the job: check the worker's Docker engine and image)", cause, retry+1, maxRetry+1)
	res.FinishedAt = w.cfg.Now()
	res.Finish(job.ReasonInfra)
	if err := w.record(ctx, log, res); err != nil {
		return err
	}
	return fmt.Errorf("%v: %w", cause, asynq.SkipRetry)
}

// record writes the terminal result on a detached context: a final write
// must not be lost to the cancellation that ended the job.
func (w *Worker) record(ctx context.Context, log *slog.Logger, res job.Result) error {
	dctx, cancel := detached(ctx)
	defer cancel()
	stored, first, err := w.store.Record(dctx, res)
	if err != nil && !errors.Is(err, results.ErrNotPublished) {
		return fmt.Errorf("worker: record result of %s: %w", res.ID, err)
	}
	if err != nil {
		log.Warn("result stored but not published; the republisher next to the scheduler publishes it later", "err", err)
	}
	if !first {
		log.Info("job already had a result; kept the first", "state", stored.State, "reason", stored.Reason)
	}
	log.Debug("job finished", "state", stored.State, "reason", stored.Reason)
	if first {
		w.m.JobFinished(dctx, res.Queue, string(res.State), string(res.Reason))
		if !res.StartedAt.IsZero() && !res.FinishedAt.IsZero() {
			w.m.RunDuration(dctx, res.Queue, string(res.Reason), res.FinishedAt.Sub(res.StartedAt))
		}
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(telemetry.AttrState.String(string(stored.State)), telemetry.AttrReason.String(string(stored.Reason)))
	if stored.State != job.StateSucceeded {
		span.SetAttributes(attribute.String("error.type", string(stored.Reason)))
		span.SetStatus(codes.Error, string(stored.Reason))
	}
	return nil
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// detached returns a context that outlives ctx's cancellation, with its own
// deadline, for final writes and cleanup.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
}

func withReason(a job.Attempt, r job.Reason, code int) job.Attempt {
	a.Reason, a.ExitCode = r, code
	return a
}

// jobEnv is the job's own env plus what Paddock tells it; nothing of the
// worker's environment.
func jobEnv(spec job.Spec, id string) map[string]string {
	env := make(map[string]string, len(spec.Env)+1)
	for k, v := range spec.Env {
		env[k] = v
	}
	env["PADDOCK_JOB_ID"] = id
	return env
}

func queuedAt(t *asynq.Task) time.Time {
	ts, err := time.Parse(time.RFC3339Nano, t.Headers()[job.TaskHeaderQueuedAt])
	if err != nil {
		return time.Time{}
	}
	return ts
}

func toOutput(o sandbox.Output) job.Output {
	out := job.Output{Text: strings.ToValidUTF8(string(o.Head), "\uFFFD"), Bytes: o.Bytes, Truncated: o.Truncated}
	if o.Truncated {
		out.Tail = strings.ToValidUTF8(string(o.Tail), "\uFFFD")
		out.OmittedBytes = o.Bytes - int64(len(o.Head)) - int64(len(o.Tail))
	}
	return out
}
