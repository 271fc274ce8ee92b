package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/internal/asynqx"
	"github.com/paddockhq/paddock/internal/failwatch"
	"github.com/paddockhq/paddock/internal/retrydelay"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/telemetry"
)

// ErrConfig is wrapped by every invalid Config.
var ErrConfig = errors.New("worker: invalid config")

// Store is what New takes: *results.Store, or any value with the narrow
// interfaces the worker's parts declare beside their use. The worker keeps
// one field per interface, so each part reaches only its own concern.
type Store interface {
	ResultStore // the terminal result (handler.go, result.go)
	RunStore    // run counts and the active set (handler.go, fence.go)
	CancelFlags // the cancel flag (cancel.go, handler.go)
}

// Config configures a Worker. Zero fields take defaults.
type Config struct {
	// ID names this worker (container owner label, heartbeat key). Default
	// hostname-pid; it must match the sandbox Runtime's Owner.
	ID string
	// Caps re-validate every spec taken from the queue.
	Caps job.Caps
	// Concurrency is the number of jobs run at once (default 4).
	Concurrency int
	// Intakes is the number of asynq servers taking tasks from the queue,
	// Concurrency shared among them (default 1; at most Concurrency). One
	// takes one task at a time, a Redis script per queue it tries, so it
	// bounds the worker to about a task per Redis round trip, whatever
	// Concurrency is; more take tasks in parallel, each at the idle Redis
	// cost of one (its polls, heartbeat and forwarder). For fleets of many
	// short jobs. docs/benchmarks.md, control_plane.
	Intakes int
	// Queues maps queue names to weights (default job.QueueWeights of
	// Caps.Queues: 4:2:1 for three).
	Queues map[string]int
	// StrictPriority drains higher-weight queues first.
	StrictPriority bool
	// TaskCheckInterval is how often an idle worker polls Redis (default
	// 100 ms; asynq's 1 s default adds up to a second to an idle fleet).
	// With Wakeups it is the backstop instead: how long a queue found empty
	// goes unasked without a wake-up (default 1 s).
	TaskCheckInterval time.Duration
	// Wakeups: Wake is called for every job enqueued (Build subscribes to
	// job.WakeSubject; a caller of New calls it itself), and an idle worker
	// asks Redis for a queue's jobs only when woken, or after
	// TaskCheckInterval (wake.go).
	Wakeups bool
	// DelayedTaskCheckInterval is how often delayed jobs and queue retries
	// are moved to their queue (default 1 s without Wakeups, 3 s with: two
	// scripts per queue per check count against an idle worker's Redis load).
	DelayedTaskCheckInterval time.Duration
	// ShutdownTimeout is the drain grace on Stop (default 30 s): running
	// jobs may finish within it; then their containers are killed and
	// their tasks re-queued.
	ShutdownTimeout time.Duration
	// HeartbeatTTL of the worker's liveness key (default 8 s). It bounds
	// how soon a dead worker's jobs run again: a rescuer re-enqueues them
	// within TTL + RescueInterval of the last beat. A worker that could not
	// renew its key for TTL − TTL/3 fences itself: it kills its running
	// jobs (they go back to the queue) before anyone may judge it dead. A
	// shorter TTL rescues sooner, but a Redis stall longer than TTL − TTL/3
	// then kills every running job. Minimum 3 s; keep it at least the
	// sandbox watchdog + WatchdogMargin, so that a frozen worker's boxes
	// end before its key can expire: New refuses a shorter one
	// (ErrHeartbeatTTL).
	HeartbeatTTL time.Duration
	// HeartbeatInterval between beats (default 1 s, at most TTL/3).
	HeartbeatInterval time.Duration
	// RescueInterval is how often the rescuer looks for the running jobs of
	// dead workers (default 2 s; one Redis script per pass).
	RescueInterval time.Duration
	// KeyPrefix of Paddock's Redis keys (default "paddock:").
	KeyPrefix string
	// Volumes guards shared volumes (nil: jobs may not request one).
	Volumes VolumeGuard
	// Broker serves the grants of jobs that name some (spec.grants) on
	// their boxes' broker sockets; the sandbox runtime must make them
	// (sandbox.Config.BrokerSocket). Nil: no secrets broker, and a job
	// naming a grant ends as infra without running.
	Broker Broker
	// SkipSelfTest skips the start-up sandbox self-test (tests only).
	SkipSelfTest bool
	// NoopExecutor is for benchmarks only (the control plane's own cost):
	// no sandbox runtime is started (New takes a nil one), and every
	// command "runs" at once with exit 0 and empty output, each attempt
	// noted NoopNote. Everything else is the real handler path. noop.go.
	// Never in production: `paddock worker --noop-executor` refuses to start
	// without PADDOCK_BENCH=1.
	NoopExecutor bool
	// Healer runs each job's command under the self-healing loop (default:
	// healer.New with the healer's defaults: rules mode, no LLM, no memo).
	Healer Healer
	// Metrics (optional) records jobs, queue wait, run time, pool and lease
	// metrics; TracerProvider and MeterProvider default to the globals.
	Metrics        *telemetry.Metrics
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// IO carries jobs' agent I/O (*results.IO): live output, kept output,
	// artifacts and input files by ref. Nil: none of it (inline files and
	// stdin still work; a job needing the store fails with a note), unless
	// Build makes it over its JetStream with IOConfig.
	IO       JobIO
	IOConfig results.IOConfig
	// Sandbox configures the sandbox runtime Build makes (its Owner is
	// always ID). New, given its runtime, does not read it.
	Sandbox sandbox.Config
	// NoLiveOutput turns live output off (kept output still works).
	NoLiveOutput bool
	// OutputRate bounds, in bytes per second, what paddock-init reads of a
	// command's output while it is streamed (live output or keep on): a
	// faster command waits on its writes. Default 256 MiB/s; < 0: no bound.
	OutputRate int64
	// VolumeQuotaInterval is how often the volume of a rw job is looked at
	// while the job runs (default 1s). QuotaKernel: whether it is at its
	// wall, to name the reason of a failure (the kernel is the wall).
	// QuotaWalk: walked for volume.max_bytes, so a job may overshoot its
	// quota by what it writes in that time.
	VolumeQuotaInterval time.Duration
	// VolumeQuota is how volumes are held to their byte bound (default
	// QuotaKernel: a filesystem of their own per volume, volfs.go).
	VolumeQuota VolumeQuota
	// VolumeMaxBytes (QuotaKernel) is the bound of a rw volume whose job
	// gives no volume.max_bytes, and the largest max_bytes this worker
	// accepts (default 1 GiB): with fsize and the tmpfs sizes, what one job
	// can put on the host's disk (docs/threat-model.md, "Disk quotas").
	VolumeMaxBytes int64
	// MaxVolumesPerTenant (QuotaKernel) bounds the volumes one tenant may
	// have on the volume root (default 64): a job that would make one more
	// is rejected. With VolumeMaxBytes it bounds what one tenant can put on
	// the root's disk, whatever the number of its jobs.
	MaxVolumesPerTenant int
	// KeptOutputKill is the output kill limit of a command whose output is
	// kept (both streams; default 4 GiB): the kept copy is cut at the IO's
	// MaxKeptBytes, this ends a command that prints on and on.
	KeptOutputKill int64
	// Artifacts bounds each job's artifacts.
	Artifacts ArtifactCaps
	// Now is the clock (tests).
	Now    func() time.Time
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	c.ID = cmp.Or(c.ID, DefaultID())
	c.Caps.Volumes = c.Volumes != nil
	c.Caps = c.Caps.WithDefaults()
	c.Concurrency = cmp.Or(c.Concurrency, 4)
	c.Intakes = min(max(c.Intakes, 1), max(c.Concurrency, 1))
	if c.VolumeQuotaInterval <= 0 {
		c.VolumeQuotaInterval = time.Second
	}
	c.VolumeQuota = cmp.Or(c.VolumeQuota, QuotaKernel)
	c.MaxVolumesPerTenant = cmp.Or(c.MaxVolumesPerTenant, 64)
	if c.MaxVolumesPerTenant < 0 {
		return c, fmt.Errorf("%w: negative MaxVolumesPerTenant", ErrConfig)
	}
	c.VolumeMaxBytes = cmp.Or(c.VolumeMaxBytes, 1<<30)
	if (c.VolumeQuota != QuotaKernel && c.VolumeQuota != QuotaWalk) || c.VolumeMaxBytes < 1<<20 || c.VolumeMaxBytes > job.MaxVolumeBytes {
		return c, fmt.Errorf("%w: volume quota %q (kernel or walk), volume max bytes %d (1 MiB to 1 TiB)", ErrConfig, c.VolumeQuota, c.VolumeMaxBytes)
	}
	c.OutputRate = cmp.Or(c.OutputRate, 256<<20)
	c.OutputRate = max(c.OutputRate, 0)
	c.KeptOutputKill = cmp.Or(c.KeptOutputKill, 4<<30)
	c.Artifacts = c.Artifacts.withDefaults()
	if len(c.Queues) == 0 {
		c.Queues = job.QueueWeights(c.Caps.Queues)
	}
	c = c.timingDefaults()
	c.KeyPrefix = cmp.Or(c.KeyPrefix, "paddock:")
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
			SpanAttributes: SandboxSpanAttributes, Metrics: healer.Metrics{Heal: c.Metrics.HealAttempt, Event: c.Metrics.HealEvent}})
		if err != nil {
			return c, err
		}
		c.Healer = h
	}
	if c.Concurrency < 0 {
		return c, fmt.Errorf("%w: concurrency %d", ErrConfig, c.Concurrency)
	}
	if c.HeartbeatTTL < 3*time.Second || c.HeartbeatInterval <= 0 || c.HeartbeatInterval > c.HeartbeatTTL/3 || c.RescueInterval < 0 {
		return c, fmt.Errorf("%w: heartbeat TTL %s (≥ 3 s), interval %s (> 0, ≤ TTL/3) and rescue interval %s (≥ 0)",
			ErrConfig, c.HeartbeatTTL, c.HeartbeatInterval, c.RescueInterval)
	}
	for q, w := range c.Queues {
		if w <= 0 {
			return c, fmt.Errorf("%w: queue %q has weight %d; weights must be > 0", ErrConfig, q, w)
		}
	}
	return c, nil
}

// timingDefaults fills the polling, shutdown and liveness intervals.
func (c Config) timingDefaults() Config {
	if c.TaskCheckInterval == 0 {
		c.TaskCheckInterval = 100 * time.Millisecond
		if c.Wakeups {
			c.TaskCheckInterval = time.Second
		}
	}
	if c.DelayedTaskCheckInterval == 0 {
		c.DelayedTaskCheckInterval = time.Second
		if c.Wakeups {
			c.DelayedTaskCheckInterval = 3 * time.Second
		}
	}
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 30*time.Second)
	c.HeartbeatTTL = cmp.Or(c.HeartbeatTTL, 8*time.Second)
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = min(time.Second, c.HeartbeatTTL/3)
	}
	c.RescueInterval = cmp.Or(c.RescueInterval, 2*time.Second)
	return c
}

// Worker runs jobs from asynq in sandbox sessions.
type Worker struct {
	// wakePub publishes a wake-up to every worker (job.WakeSubject); Build
	// sets it when it has NATS (wake.go).
	wakePub func(queue string)

	rdb     redis.UniversalClient
	rt      *sandbox.Runtime
	store   ResultStore // the Store given to New, by concern: store, runs, flags
	runs    RunStore
	flags   CancelFlags
	cfg     Config
	hb      *Heartbeat
	rescue  rescuer // internal/asynqx.Rescuer (fence.go)
	fence   fence   // running handlers, for the heartbeat's fence (fence.go)
	reap    *sandbox.Reaper
	log     *slog.Logger
	tr      trace.Tracer
	m       *telemetry.Metrics
	poolReg metric.Registration

	mu      sync.Mutex
	srvs    []*asynq.Server // Config.Intakes of them
	running bool
	drain   drainer // running handlers; cuts them at the end of the grace (drain.go)
	// vfs makes the volumes' filesystems (QuotaKernel with volumes);
	// vfsErr, when set, is why it cannot, and rw volume jobs are refused.
	vfs    *volumeFS
	vfsErr error
	gate   atomic.Pointer[asynqx.Gate] // dequeues wait here for a wake-up (wake.go); nil without Wakeups
}

// New returns a Worker over rdb (asynq and heartbeats), rt (the sandbox
// runtime; the worker starts and stops it; nil and unused with
// Config.NoopExecutor) and store (results). Build makes rt, the agent I/O
// and the wake-up subscription from the connections; use New for a
// runtime of your own.
func New(rdb redis.UniversalClient, rt *sandbox.Runtime, store Store, cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.NoopExecutor {
		rt = nil // bench only: no sandbox (noop.go)
	} else if rt == nil {
		return nil, fmt.Errorf("%w: no sandbox runtime; pass one (NoopExecutor, for benchmarks only, runs without)", ErrConfig)
	}
	if rt != nil && rt.Owner() != cfg.ID {
		return nil, fmt.Errorf("%w: worker id %q differs from the sandbox owner %q", ErrConfig, cfg.ID, rt.Owner())
	}
	if rt != nil {
		if err := CheckHeartbeatTTL(cfg.HeartbeatTTL, rt.Watchdog()); err != nil {
			return nil, err
		}
	}
	w := &Worker{rdb: rdb, rt: rt, store: store, runs: store, flags: store, cfg: cfg, log: cfg.Logger, m: cfg.Metrics,
		tr: cfg.TracerProvider.Tracer("github.com/paddockhq/paddock/worker")}
	w.hb = NewHeartbeatEvery(rdb, cfg.ID, cfg.KeyPrefix, cfg.HeartbeatTTL, cfg.HeartbeatInterval)
	w.hb.OnFence = func() {
		w.log.Error("heartbeat not renewed in time: killing every running job before a rescuer may run it elsewhere (Redis unreachable, or this process was frozen)")
		w.fence.cancelAll()
	}
	w.hb.Status = w.beatStatus
	w.vfs, w.vfsErr = startVolumeFS(cfg)
	w.rescue = asynqx.NewRescuer(rdb, asynqx.RescuerConfig{KeyPrefix: cfg.KeyPrefix, Interval: cfg.RescueInterval, Logger: cfg.Logger,
		Grace: RescueGrace(cfg.HeartbeatTTL),
		Wake:  w.wakeRescued,
		OnRescue: func(string) {
			w.m.RunRescued(context.Background())
			_ = failwatch.NoteRescue(context.Background(), rdb, cfg.KeyPrefix) // the fleet view's count
		}})
	if rt != nil {
		w.reap = sandbox.NewReaper(rt, w.hb)
		w.reap.OnReap = func(n int) { w.m.ContainersReaped(context.Background(), n) }
	}
	return w, nil
}

// beatStatus fills the facts every heartbeat writes (job.WorkerBeat).
func (w *Worker) beatStatus(b *job.WorkerBeat) {
	b.Concurrency, b.Running = w.cfg.Concurrency, w.fence.running()
	if w.rt != nil {
		b.Pool = w.rt.PoolSize()
	}
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
	if err := w.startRuntime(ctx); err != nil {
		return err
	}
	if err := w.hb.Start(ctx); err != nil {
		w.stopRuntime()
		return fmt.Errorf("worker: heartbeat: %w", err)
	}
	if w.reap != nil {
		_ = w.reap.Start(ctx)
	}
	_ = w.rescue.Start(ctx)
	mux := asynq.NewServeMux()
	mux.Use(telemetry.AsynqMiddleware(telemetry.WithTracerProvider(w.cfg.TracerProvider), telemetry.WithMeterProvider(w.cfg.MeterProvider)))
	mux.Use(w.drainable, w.fenceable, w.watchCancel) // drain.go, fence.go, cancel.go
	w.drain.reset()
	mux.HandleFunc(job.TaskType, w.ProcessTask) // handler.go
	if w.m != nil && w.poolReg == nil && w.rt != nil {
		w.poolReg, _ = w.m.RegisterPoolSize(func() int64 { return int64(w.rt.PoolSize()) })
	}
	if w.cfg.Wakeups {
		w.gate.Store(asynqx.NewGate(w.cfg.TaskCheckInterval, slices.Collect(maps.Keys(w.cfg.Queues)))) // a fresh one: Stop closed the last
	}
	for i := range w.cfg.Intakes {
		// Concurrency shared out: the first ones take the remainder.
		srv := w.newServer(w.cfg.Concurrency/w.cfg.Intakes + min(1, max(0, w.cfg.Concurrency%w.cfg.Intakes-i)))
		if err := srv.Start(mux); err != nil {
			w.shutdownServers()
			w.stopBackground()
			return fmt.Errorf("worker: start asynq server: %w", err)
		}
		w.srvs = append(w.srvs, srv)
	}
	w.running = true
	return nil
}

// newServer is one asynq server of the worker's intake (Config.Intakes).
// With wake-ups, every server dequeues through the one gate (wake.go).
func (w *Worker) newServer(concurrency int) *asynq.Server {
	var rdb redis.UniversalClient = w.rdb
	check := w.cfg.TaskCheckInterval
	if g := w.gate.Load(); w.cfg.Wakeups && g != nil {
		rdb, check = g.Client(w.rdb), asynqx.GatedRoundGap
	}
	return asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       concurrency,
		Queues:            w.cfg.Queues,
		StrictPriority:    w.cfg.StrictPriority,
		TaskCheckInterval: check,
		ShutdownTimeout:   w.cfg.ShutdownTimeout + drainKillMargin, // see drain.go
		RetryDelayFunc:    retryDelay,
		Logger:            asynqLogger{w.log.With("component", "asynq")},
		LogLevel:          asynq.WarnLevel,

		// Delayed jobs and queue retries become runnable within 1-2 s of
		// their time (asynq's default 5 s); two scripts per queue per check.
		// docs/scheduling.md.
		DelayedTaskCheckInterval: w.cfg.DelayedTaskCheckInterval,
	})
}

// shutdownServers stops the intake's servers at once (each waits for its
// own running handlers within the shutdown grace).
func (w *Worker) shutdownServers() {
	if g := w.gate.Load(); g != nil {
		g.Close() // a processor waiting at the gate sees the shutdown
	}
	var wg sync.WaitGroup
	for _, srv := range w.srvs {
		wg.Go(srv.Shutdown)
	}
	wg.Wait()
	w.srvs = nil
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
	w.shutdownServers()
	// asynq does not wait for a handler it re-queued: wait until every
	// handler has destroyed its container before stopping the runtime.
	if !w.drain.wait(drainKillMargin + 20*time.Second) {
		w.log.Error("jobs still running after the drain; their containers are removed with the runtime")
	}
	w.stopBackground()
	if w.poolReg != nil {
		_ = w.poolReg.Unregister()
		w.poolReg = nil
	}
}

// startRuntime starts the sandbox runtime (the warm pool) and runs the
// self-test; none with the no-op executor.
func (w *Worker) startRuntime(ctx context.Context) error {
	if w.rt == nil {
		return nil
	}
	if err := w.rt.Start(ctx, w.DefaultProfile()); err != nil {
		return err
	}
	if err := w.selfTest(ctx); err != nil {
		w.rt.Stop()
		return err
	}
	return nil
}

func (w *Worker) stopRuntime() {
	if w.rt != nil {
		w.rt.Stop()
	}
}

// selfTest refuses to start when a limit does not apply, for every image a
// job may name: a limit that holds for one image's init may not for
// another's. Config.SkipSelfTest skips it.
func (w *Worker) selfTest(ctx context.Context) error {
	if w.cfg.SkipSelfTest {
		return nil
	}
	for _, img := range w.cfg.Caps.Images {
		t0 := time.Now()
		p := w.DefaultProfile()
		p.Image = img
		if err := w.rt.SelfTest(ctx, p); err != nil {
			return err
		}
		w.log.Info("sandbox self-test passed", "image", img, "took", time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// stopBackground stops what Start starts before intake, in reverse order:
// the rescuer, the reaper, the heartbeat, then the sandbox runtime (the
// warm pool).
func (w *Worker) stopBackground() {
	w.rescue.Stop()
	if w.reap != nil {
		w.reap.Stop()
	}
	w.hb.Stop()
	w.stopRuntime()
}

// retryDelay backs off infrastructure retries: 1 s, 2 s, 4 s … capped at 30 s.
//
// A task whose context asynq canceled (CancelProcessing, which a cancel
// request sends) is retried by asynq at once, without waiting for the
// handler, which is still destroying the container and recording the
// canceled result. A retry within a second would then start, see the
// cancel flag and record "canceled before it started" (runs 0, no
// attempts) first, hiding the run that really happened. It waits
// interruptedRetryDelay instead: longer than the handler's detached
// clean-up, so the run's own result is recorded and the retry only
// republishes it.
func retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	d := retrydelay.Nth(uint64(n)+1, time.Second, 30*time.Second, 0)
	if errors.Is(err, context.Canceled) {
		d = max(d, interruptedRetryDelay)
	}
	return d
}

// interruptedRetryDelay is the least delay of a retry after asynq canceled
// the task's context: the detached clean-up's 15 s (result.go) and then some.
const interruptedRetryDelay = 20 * time.Second
