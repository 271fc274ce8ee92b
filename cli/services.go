package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/broker"
	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/devstack"
	"github.com/paddockhq/paddock/internal/redact"
	"github.com/paddockhq/paddock/internal/redisurl"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/worker"
)

// URLs may carry credentials (user:password@, a NATS token, ?password=):
// every one that is logged, printed or put into an error goes through
// redact.URL first.

// checkNATSURL checks --nats-url before anything connects
// (the SDK's CheckURL, redacted).
func checkNATSURL(raw string) error {
	if err := pclient.CheckURL(raw); err != nil {
		return fmt.Errorf("--nats-url: %w", err)
	}
	return nil
}

// parseRedisURL parses --redis-url: one server (redis://, rediss://,
// unix://) or a master behind Sentinels (redis+sentinel://,
// redis-sentinel://); internal/redisurl lists the forms.
func parseRedisURL(raw string) (*redisurl.URL, error) {
	return redisurl.Parse("--redis-url", raw)
}

// connectRedis returns the process's one Redis client, with socket
// timeouts, after checking the server answers. Every Redis user of the
// process (asynq's client, server and inspector, results, locks, the rate
// window, the index, the rescuer, the wake gate, the dashboard) shares it,
// so with a Sentinel URL all of them follow a failover together.
func connectRedis(ctx context.Context, g *globals, url string) (*redis.Client, error) {
	u, err := parseRedisURL(url)
	if err != nil {
		return nil, err
	}
	pw, err := g.auth.redisPassword()
	if err != nil {
		return nil, err
	}
	if pw != "" {
		u.SetAuth("", pw, devstack.DefaultRedisUser)
	}
	u.SetTimeouts(5*time.Second, 5*time.Second, 5*time.Second)
	rdb := u.NewClient()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		if derr := u.Diagnose(pctx); derr != nil {
			err = derr // what each Sentinel said, not go-redis's catch-all
		}
		return nil, fmt.Errorf("connect to Redis at %s: %w (start one with `paddock up`, or set --redis-url / PADDOCK_REDIS_URL)", redact.URL(url), err)
	}
	return rdb, nil
}

func connectDocker(ctx context.Context) (*client.Client, error) {
	d, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := d.Ping(pctx, client.PingOptions{}); err != nil {
		d.Close()
		return nil, fmt.Errorf("the Docker engine is unreachable (%v): start dockerd (`make demo` does), or point DOCKER_HOST at one", err)
	}
	return d, nil
}

// capsFlags are the operator caps shared by the scheduler and the worker.
type capsFlags struct {
	images, queues, envAllow []string
	maxMemoryMB, maxPids     int64
	maxCPUs                  float64
	maxJobTimeout            time.Duration
	volumes                  bool
	allowInstall             bool
	keepOutput               bool
	// broker: the secrets broker's flags, and the broker they load (once
	// per process: `up` runs the scheduler and the worker on one).
	broker   brokerFlags
	brokerMu sync.Mutex
	fleetBrk *fleetBroker
}

// loadBroker returns this process's secrets broker (nil without
// --broker-policy), loading it on first use; serve (a worker) also starts
// the serving side, with its rate buckets in limiter (nil: in process).
func (c *capsFlags) loadBroker(ctx context.Context, serve bool, limiter broker.Limiter, obs *observability, log *slog.Logger) (*fleetBroker, error) {
	c.brokerMu.Lock()
	defer c.brokerMu.Unlock()
	if c.fleetBrk == nil {
		f, err := startBroker(ctx, &c.broker, serve, limiter, obs, log)
		if err != nil || f == nil {
			return nil, err
		}
		c.fleetBrk = f
	} else if serve && !c.fleetBrk.Serving() {
		c.fleetBrk.limiter = limiter
		if err := c.fleetBrk.startServing(ctx, obs); err != nil {
			return nil, err
		}
	}
	return c.fleetBrk, nil
}

func (c *capsFlags) register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.images, "images", slices.Clone(defaultImages), "images jobs may use; the first is the default")
	fs.StringSliceVar(&c.queues, "queues", slices.Clone(defaultQueues), "queues jobs may name, highest priority first; the default queue is \"default\" when listed, else the first")
	fs.StringSliceVar(&c.envAllow, "env-allow", nil, "env names jobs may set (NAME or PREFIX*); empty allows any non-reserved name")
	fs.Int64Var(&c.maxMemoryMB, "max-memory-mb", 2048, fmt.Sprintf("cap on a job's memory_mb, at least %d (jobs that name none get 512, or the cap if lower)", job.MinMemoryMB))
	fs.Int64Var(&c.maxPids, "max-pids", 512, fmt.Sprintf("cap on a job's pids, at least %d (jobs that name none get 64, or the cap if lower)", job.MinPids))
	fs.Float64Var(&c.maxCPUs, "max-cpus", 2, fmt.Sprintf("cap on a job's cpus, at least %g (jobs that name none get 0.5, or the cap if lower)", job.MinCPUs))
	fs.DurationVar(&c.maxJobTimeout, "max-job-timeout", time.Hour, "cap on a job's job_timeout_s, whole seconds, at least 1s (jobs that name none get 5m, or the cap if lower)")
	fs.BoolVar(&c.allowInstall, "allow-install", false, "let jobs ask for installs of missing tools (heal.allow_install; workers need --package-dir or an install network)")
	fs.BoolVar(&c.volumes, "volumes", false, "accept jobs that ask for a shared volume (workers need --volume-root)")
	fs.BoolVar(&c.keepOutput, "keep-output", false, "keep every job's complete output in its tenant's output bucket unless the job says output.keep=false")
	c.broker.register(fs)
}

func (c *capsFlags) caps() job.Caps {
	// The default queue goes first (Caps.Queues[0] is the default); the
	// priority order stays --queues' own (job.QueueWeights in newWorker).
	queues := slices.Clone(c.queues)
	if i := slices.Index(queues, job.DefaultQueue); i > 0 {
		queues = slices.Insert(slices.Delete(queues, i, i+1), 0, job.DefaultQueue)
	}
	return job.Caps{Images: c.images, Queues: queues, EnvAllow: c.envAllow,
		MaxMemoryMB: c.maxMemoryMB, MaxPids: c.maxPids, MaxCPUs: c.maxCPUs, MaxJobTimeout: c.maxJobTimeout, Volumes: c.volumes, AllowInstall: c.allowInstall,
		KeepOutput: c.keepOutput}.WithDefaults()
}

// capsFlag names the flag that sets each job.Caps field.
var capsFlag = map[string]string{
	"Images": "--images", "Queues": "--queues", "EnvAllow": "--env-allow",
	"MaxMemoryMB": "--max-memory-mb", "MaxPids": "--max-pids", "MaxCPUs": "--max-cpus", "MaxJobTimeout": "--max-job-timeout",
}

// validate checks the caps the flags give (job.Caps.Validate after the
// defaults), naming the flag of each problem and what it allows.
func (c *capsFlags) validate() error {
	var probs []string
	if err := c.broker.check(); err != nil {
		probs = append(probs, err.Error())
	}
	if len(c.images) == 0 {
		probs = append(probs, "--images: the list is empty; name at least one image (the first is the default)")
	}
	if len(c.queues) == 0 {
		probs = append(probs, "--queues: the list is empty; name at least one queue")
	}
	// A zero cap field means "the default" to job.Caps; a zero flag is a
	// mistake.
	for _, z := range []struct {
		zero    bool
		flag, a string
	}{
		{c.maxMemoryMB == 0, "--max-memory-mb", fmt.Sprintf("%d MiB", job.MinMemoryMB)},
		{c.maxPids == 0, "--max-pids", fmt.Sprint(job.MinPids)},
		{c.maxCPUs == 0, "--max-cpus", fmt.Sprint(job.MinCPUs)},
		{c.maxJobTimeout == 0, "--max-job-timeout", "1s"},
	} {
		if z.zero {
			probs = append(probs, fmt.Sprintf("%s: 0 is out of range; allowed %s or more", z.flag, z.a))
		}
	}
	var ce *job.CapsError
	if err := c.caps().Validate(); errors.As(err, &ce) {
		for _, f := range ce.Fields {
			name, ok := capsFlag[f.Field]
			if !ok {
				name = "caps " + f.Field // a default no flag sets
			}
			probs = append(probs, name+": "+f.Message)
		}
	} else if err != nil {
		probs = append(probs, err.Error())
	}
	if len(probs) > 0 {
		return fmt.Errorf("invalid operator caps: %s", strings.Join(probs, "; "))
	}
	return nil
}

// checkStart validates a service's flags before it connects to anything:
// the caps, the retention, the service URLs and, for a worker (wf), the
// heal flags and the heartbeat TTL against the watchdog.
func checkStart(g *globals, cf *capsFlags, sf *schedFlags, wf *workerFlags) error {
	errs := []error{cf.validate(), sf.check(cf.maxJobTimeout), checkNATSURL(g.natsURL)}
	if _, err := parseRedisURL(g.redisURL); err != nil {
		errs = append(errs, err)
	}
	if wf != nil {
		errs = append(errs, wf.heal.check(), wf.checkHeartbeatTTL(nil))
	}
	return errors.Join(errs...)
}

// checkHeartbeatTTL names the flags of a heartbeat TTL too short for the
// watchdog (worker.CheckHeartbeatTTL, or err when it is that error).
func (w *workerFlags) checkHeartbeatTTL(err error) error {
	if err == nil {
		err = worker.CheckHeartbeatTTL(w.heartbeatTTL, w.watchdog)
	}
	if errors.Is(err, worker.ErrHeartbeatTTL) {
		return fmt.Errorf("--heartbeat-ttl %s must be at least --watchdog %s + %s: %w", w.heartbeatTTL, w.watchdog, worker.WatchdogMargin, err)
	}
	return err
}

// workerFlags configure a worker and its sandbox.
type workerFlags struct {
	id              string
	concurrency     int
	intakes         int
	poolSize        int
	poolMax         int
	poolStarts      int
	initPath        string
	runtime         string
	shutdownTimeout time.Duration
	taskCheck       time.Duration
	wakeups         bool
	skipSelfTest    bool
	strictPriority  bool
	outputKillMB    int64
	heal            healFlags
	volumeRoot      string
	volumeQuota     string
	volumeMaxMB     int64
	maxVolumes      int
	leaseTTL        time.Duration
	lockWait        time.Duration
	runDir          string
	watchdog        time.Duration
	heartbeatTTL    time.Duration
	rescueInterval  time.Duration
	liveOutput      bool
	liveRateKB      int64
	outputRateMB    int64
	maxKeptMB       int64
	artifacts       worker.ArtifactCaps
	maxArtifactMB   int64
	boxCPUShares    int64
	boxCPUSet       string
	demoteAfter     time.Duration
	demotedShares   int64
	bench           benchFlags // `paddock worker` only (bench.go)
}

func (w *workerFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&w.id, "worker-id", "", "worker id (default hostname-pid)")
	fs.IntVar(&w.concurrency, "concurrency", 4, "jobs run at once by this worker")
	fs.IntVar(&w.intakes, "intakes", 1, "queue readers sharing --concurrency: one takes a task per Redis round trip, so a worker of many short jobs needs more (each adds one reader's idle Redis polls)")
	fs.IntVar(&w.poolSize, "pool-size", 2, "warm containers kept per profile in use (-1 disables the pool)")
	fs.IntVar(&w.poolMax, "pool-max", 8, "warm and starting containers across all profiles; a busy profile's pool grows above --pool-size up to its share of this")
	fs.IntVar(&w.poolStarts, "pool-starts", 0, "warm containers started at once (0: --pool-size)")
	fs.StringVar(&w.initPath, "init-path", "", "host path of paddock-init (default: next to this binary, else /usr/local/lib/paddock/paddock-init)")
	fs.StringVar(&w.runtime, "runtime", "", "OCI runtime for sandboxes (runc by default; runsc for gVisor)")
	fs.DurationVar(&w.shutdownTimeout, "shutdown-timeout", 30*time.Second, "drain grace on SIGTERM before running jobs are killed and re-queued")
	fs.DurationVar(&w.taskCheck, "task-check-interval", 0, "how often an idle worker polls Redis (default 1s with --wakeups, else 100ms)")
	fs.BoolVar(&w.wakeups, "wakeups", true, "take a job the moment the scheduler enqueues it (its wake-up on paddock.wake.<queue>), polling Redis only every --task-check-interval when idle")
	fs.BoolVar(&w.skipSelfTest, "skip-self-test", false, "skip the start-up proof that sandbox limits apply (not for production)")
	fs.BoolVar(&w.strictPriority, "strict-priority", false, "take a lower queue's jobs only while every higher queue (--queues order) is empty; default: weighted 4:2:1")
	fs.Int64Var(&w.outputKillMB, "output-kill-mb", 256, "kill a command whose output passes this many MiB (reason output_cap)")
	w.heal.register(fs)
	fs.StringVar(&w.volumeRoot, "volume-root", "", "directory holding shared volumes (a shared filesystem across hosts); empty disables volumes")
	fs.StringVar(&w.volumeQuota, "volume-quota", "kernel", "how a volume is held to its byte quota: kernel (a loop-mounted filesystem of its own per volume; needs root with CAP_SYS_ADMIN, loop devices and e2fsprogs, else rw volume jobs are refused) or walk (the old measurement by walking the volume, which a job can step around: only where the worker cannot mount)")
	fs.IntVar(&w.maxVolumes, "max-volumes-per-tenant", 64, "kernel quotas: the volumes one tenant may have on the volume root; a job that would make one more is rejected")
	fs.Int64Var(&w.volumeMaxMB, "volume-max-mb", 1024, "kernel quotas: the quota of a rw volume whose job gives no volume.max_bytes, and the largest one accepted; each volume's image is made to hold it (sparse)")
	fs.DurationVar(&w.leaseTTL, "lease-ttl", 15*time.Second, "Redis lease ttl of a volume lock (a crashed holder blocks the volume this long)")
	fs.DurationVar(&w.lockWait, "lock-wait", 30*time.Second, "how long a job waits for a busy volume before the queue retries it")
	fs.StringVar(&w.runDir, "run-dir", "", "directory of the sandboxes' private control sockets; the Docker engine must see it at the same path (default $PADDOCK_RUN_DIR, else /run/paddock as root)")
	fs.DurationVar(&w.watchdog, "watchdog", 5*time.Second, "a sandbox whose worker is silent this long kills its processes and exits")
	fs.DurationVar(&w.heartbeatTTL, "heartbeat-ttl", 8*time.Second, "liveness key TTL: a dead worker's jobs run again elsewhere ~1.25×TTL+2 s after its last beat (a rescuer waits TTL/4 past the expiry); a worker that cannot renew it for 2/3 of it kills its jobs (a Redis stall that long does too); at least --watchdog + 2 s")
	fs.DurationVar(&w.rescueInterval, "rescue-interval", 2*time.Second, "how often this worker looks for the running jobs of dead workers to run again (one Redis script per pass)")
	fs.BoolVar(&w.liveOutput, "live-output", true, "publish every job's output live on paddock.output.<tenant>.<id> (paddock logs -f)")
	fs.Int64Var(&w.liveRateKB, "live-rate-kb", 1024, "live output of one job, KiB per second; what a job prints faster is dropped with a marker")
	fs.Int64Var(&w.outputRateMB, "output-rate-mb", 256, "MiB per second the sandbox reads of a streamed command's output (live or kept); a faster command waits; 0 = no bound")
	fs.Int64Var(&w.maxKeptMB, "max-kept-mb", 2048, "kept output of one stream of one job, MiB; past it the object is cut with a note")
	fs.IntVar(&w.artifacts.MaxFiles, "max-artifacts", 100, "artifacts one job may leave")
	fs.Int64Var(&w.maxArtifactMB, "max-artifact-mb", 64, "size of one artifact, MiB (the job's total is 4 times this)")
	fs.Int64Var(&w.boxCPUShares, "box-cpu-shares", 0, "CPU weight of every sandbox against the others (cgroup cpu.shares; 0 = the engine's 1024)")
	fs.StringVar(&w.boxCPUSet, "box-cpuset", "", "host CPUs the sandboxes may run on, e.g. 1 to keep CPU 0 for the worker and the engine (default: all)")
	fs.DurationVar(&w.demoteAfter, "demote-after", 0, "lower the CPU weight of a sandbox whose command has run this long to --demoted-cpu-shares, so that long busy jobs yield to starting and short ones (0 = off)")
	fs.Int64Var(&w.demotedShares, "demoted-cpu-shares", 16, "CPU weight of a demoted sandbox (see --demote-after)")
}

func newWorker(ctx context.Context, rdb *redis.Client, js jetstream.JetStream, d *client.Client, store worker.Store, wf *workerFlags, cf *capsFlags, obs *observability, log *slog.Logger) (*worker.Worker, error) {
	// The grants' rates hold for the whole fleet: their buckets are on
	// Redis, shared by every worker (docs/broker.md, Rates).
	fb, err := cf.loadBroker(ctx, true, broker.NewRedisLimiter(rdb, ""), obs, log)
	if err != nil {
		return nil, err
	}
	cfg := worker.Config{
		ID: wf.id, Caps: cf.caps(), Concurrency: wf.concurrency, Intakes: wf.intakes, Queues: job.QueueWeights(cf.queues),
		TaskCheckInterval: wf.taskCheck, Wakeups: wf.wakeups, ShutdownTimeout: wf.shutdownTimeout, SkipSelfTest: wf.skipSelfTest, Logger: log,
		StrictPriority: wf.strictPriority, Metrics: obs.metrics,
		TracerProvider: obs.provider.TracerProvider(), MeterProvider: obs.provider.MeterProvider(),
		NoLiveOutput: !wf.liveOutput, OutputRate: max(wf.outputRateMB<<20, -1),
		Artifacts: worker.ArtifactCaps{MaxFiles: wf.artifacts.MaxFiles, MaxFileBytes: wf.maxArtifactMB << 20, MaxTotalBytes: 4 * wf.maxArtifactMB << 20},
		Broker:    fb.server(), NoopExecutor: wf.bench.noopExecutor, // no sandbox runtime with --noop-executor (bench.go)
		HeartbeatTTL: wf.heartbeatTTL, RescueInterval: wf.rescueInterval,
		IOConfig: results.IOConfig{LiveRate: wf.liveRateKB << 10, MaxKeptBytes: wf.maxKeptMB << 20},
		Sandbox: sandbox.Config{InitPath: wf.initPath, Runtime: wf.runtime,
			PoolSize: wf.poolSize, PoolMax: wf.poolMax, PoolStarts: wf.poolStarts, OutputKillBytes: wf.outputKillMB << 20, ExtraMounts: wf.heal.packageMounts(),
			RunDir: wf.runDir, Watchdog: wf.watchdog,
			CPUShares: wf.boxCPUShares, CPUSet: wf.boxCPUSet, DemoteAfter: wf.demoteAfter, DemotedCPUShares: wf.demotedShares},
	}
	if wf.outputRateMB == 0 {
		cfg.OutputRate = -1
	}
	if cfg.Healer, err = newHealer(rdb, &wf.heal, obs, log); err != nil {
		return nil, err
	}
	if wf.volumeRoot != "" {
		leaser, err := locks.NewLeaser(rdb, locks.LeaseConfig{Logger: log})
		if err != nil {
			return nil, err
		}
		g, err := locks.NewGuard(leaser, locks.GuardConfig{Root: wf.volumeRoot, LeaseTTL: wf.leaseTTL, Wait: wf.lockWait, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--volume-root: %w", err)
		}
		cfg.Volumes = worker.LockGuard(g)
		cfg.VolumeQuota, cfg.VolumeMaxBytes = worker.VolumeQuota(wf.volumeQuota), wf.volumeMaxMB<<20
		cfg.MaxVolumesPerTenant = wf.maxVolumes
	}
	w, err := worker.Build(ctx, rdb, d, js, store, cfg)
	if err != nil {
		return nil, wf.checkHeartbeatTTL(err)
	}
	return w, nil
}
