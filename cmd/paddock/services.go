package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/worker"
)

// connectNATS connects with unlimited reconnects: a NATS restart must not
// end a service.
func connectNATS(ctx context.Context, url, name string, log *slog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond),
		nats.Timeout(5*time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", c.ConnectedUrl()) }))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (start one with `paddock up`, or set --nats-url / PADDOCK_NATS_URL)", url, err)
	}
	return nc, nil
}

// redisOptions parses redis://, rediss:// and unix:// URLs.
func redisOptions(url string) (*redis.Options, error) {
	if path, ok := strings.CutPrefix(url, "unix://"); ok {
		return &redis.Options{Network: "unix", Addr: path}, nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis-url %q: %w", url, err)
	}
	return opt, nil
}

// connectRedis returns a client with socket timeouts (DESIGN.md §6) after
// checking the server answers.
func connectRedis(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redisOptions(url)
	if err != nil {
		return nil, err
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	rdb := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w (start one with `paddock up`, or set --redis-url / PADDOCK_REDIS_URL)", url, err)
	}
	return rdb, nil
}

func connectDocker(ctx context.Context) (*client.Client, error) {
	d, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
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
}

func (c *capsFlags) register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&c.images, "images", []string{job.DefaultImage, "paddock/test:latest"}, "images jobs may use; the first is the default")
	fs.StringSliceVar(&c.queues, "queues", []string{"critical", job.DefaultQueue, "low"}, "queues jobs may name, highest priority first; the default queue is \"default\" when listed, else the first")
	fs.StringSliceVar(&c.envAllow, "env-allow", nil, "env names jobs may set (NAME or PREFIX*); empty allows any non-reserved name")
	fs.Int64Var(&c.maxMemoryMB, "max-memory-mb", 2048, "cap on a job's memory_mb")
	fs.Int64Var(&c.maxPids, "max-pids", 512, "cap on a job's pids")
	fs.Float64Var(&c.maxCPUs, "max-cpus", 2, "cap on a job's cpus")
	fs.DurationVar(&c.maxJobTimeout, "max-job-timeout", time.Hour, "cap on a job's job_timeout_s")
	fs.BoolVar(&c.allowInstall, "allow-install", false, "let jobs ask for installs of missing tools (heal.allow_install; workers need --package-dir or an install network)")
	fs.BoolVar(&c.volumes, "volumes", false, "accept jobs that ask for a shared volume (workers need --volume-root)")
}

func (c *capsFlags) caps() job.Caps {
	queues := append([]string(nil), c.queues...)
	// The default queue goes first (Caps.Queues[0] is the default).
	for i, q := range queues {
		if q == job.DefaultQueue && i > 0 {
			queues[0], queues[i] = queues[i], queues[0]
		}
	}
	return job.Caps{Images: c.images, Queues: queues, EnvAllow: c.envAllow,
		MaxMemoryMB: c.maxMemoryMB, MaxPids: c.maxPids, MaxCPUs: c.maxCPUs, MaxJobTimeout: c.maxJobTimeout, Volumes: c.volumes, AllowInstall: c.allowInstall}.WithDefaults()
}

// queueWeights gives the --queues order as asynq weights (first highest).
func (c *capsFlags) queueWeights() map[string]int {
	w := map[string]int{}
	n := len(c.queues)
	for i, q := range c.queues {
		w[q] = 1 << (n - 1 - i) // 4, 2, 1 …
	}
	return w
}

// workerFlags configure a worker and its sandbox.
type workerFlags struct {
	id              string
	concurrency     int
	poolSize        int
	initPath        string
	runtime         string
	shutdownTimeout time.Duration
	taskCheck       time.Duration
	skipSelfTest    bool
	strictPriority  bool
	outputKillMB    int64
	heal            healFlags
	volumeRoot      string
	leaseTTL        time.Duration
	lockWait        time.Duration
}

func (w *workerFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&w.id, "worker-id", "", "worker id (default hostname-pid)")
	fs.IntVar(&w.concurrency, "concurrency", 4, "jobs run at once by this worker")
	fs.IntVar(&w.poolSize, "pool-size", 2, "warm containers kept per profile in use (-1 disables the pool)")
	fs.StringVar(&w.initPath, "init-path", "", "host path of paddock-init (default: next to this binary, else /usr/local/lib/paddock/paddock-init)")
	fs.StringVar(&w.runtime, "runtime", "", "OCI runtime for sandboxes (runc by default; runsc for gVisor)")
	fs.DurationVar(&w.shutdownTimeout, "shutdown-timeout", 30*time.Second, "drain grace on SIGTERM before running jobs are killed and re-queued")
	fs.DurationVar(&w.taskCheck, "task-check-interval", 100*time.Millisecond, "how often an idle worker polls Redis")
	fs.BoolVar(&w.skipSelfTest, "skip-self-test", false, "skip the start-up proof that sandbox limits apply (not for production)")
	fs.BoolVar(&w.strictPriority, "strict-priority", false, "take a lower queue's jobs only while every higher queue (--queues order) is empty; default: weighted 4:2:1")
	fs.Int64Var(&w.outputKillMB, "output-kill-mb", 256, "kill a command whose output passes this many MiB (reason output_cap)")
	w.heal.register(fs)
	fs.StringVar(&w.volumeRoot, "volume-root", "", "directory holding shared volumes (a shared filesystem across hosts); empty disables volumes")
	fs.DurationVar(&w.leaseTTL, "lease-ttl", 15*time.Second, "Redis lease ttl of a volume lock (a crashed holder blocks the volume this long)")
	fs.DurationVar(&w.lockWait, "lock-wait", 30*time.Second, "how long a job waits for a busy volume before the queue retries it")
}

func newWorker(rdb *redis.Client, d *client.Client, store worker.Store, wf *workerFlags, cf *capsFlags, obs *observability, log *slog.Logger) (*worker.Worker, error) {
	id := wf.id
	if id == "" {
		id = defaultWorkerID()
	}
	rt, err := sandbox.New(d, sandbox.Config{Owner: id, InitPath: wf.initPath, Runtime: wf.runtime,
		PoolSize: wf.poolSize, OutputKillBytes: wf.outputKillMB << 20, ExtraMounts: wf.heal.packageMounts(), Logger: log})
	if err != nil {
		return nil, err
	}
	cfg := worker.Config{
		ID: id, Caps: cf.caps(), Concurrency: wf.concurrency, Queues: cf.queueWeights(),
		TaskCheckInterval: wf.taskCheck, ShutdownTimeout: wf.shutdownTimeout, SkipSelfTest: wf.skipSelfTest, Logger: log,
		StrictPriority: wf.strictPriority, Metrics: obs.metrics,
		TracerProvider: obs.provider.TracerProvider(), MeterProvider: obs.provider.MeterProvider(),
	}
	h, err := newHealer(rdb, &wf.heal, obs, log)
	if err != nil {
		return nil, err
	}
	cfg.Healer = h
	if wf.volumeRoot != "" {
		leaser, err := locks.NewLeaser(rdb, locks.LeaseConfig{Logger: log})
		if err != nil {
			return nil, err
		}
		g, err := locks.NewGuard(leaser, locks.GuardConfig{Root: wf.volumeRoot, LeaseTTL: wf.leaseTTL, Wait: wf.lockWait, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--volume-root: %w", err)
		}
		cfg.Volumes = g
	}
	return worker.New(rdb, rt, store, cfg)
}

var errInterrupted = errors.New("interrupted")
