package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hibiken/asynq"
	dockerclient "github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/asynqx"
	"github.com/paddockhq/paddock/internal/devstack"
	"github.com/paddockhq/paddock/internal/redact"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/telemetry"
	"github.com/paddockhq/paddock/worker"
)

type schedFlags struct {
	concurrency     int
	resultRetention time.Duration
	dedupeWindow    time.Duration
	maxRetry        int
	jobsMaxBytes    int64
	resultsMaxBytes int64
	storedMaxBytes  int64
	outputMaxBytes  int64
	maxResultBytes  int
	maxRunning      int
	slots           string
}

func (s *schedFlags) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&s.concurrency, "scheduler-concurrency", 8, "submissions validated and enqueued at once")
	cmd.Flags().DurationVar(&s.resultRetention, "result-retention", 24*time.Hour, "how long results (and duplicate-id protection) are kept")
	cmd.Flags().DurationVar(&s.dedupeWindow, "dedupe-window", 10*time.Minute, "JetStream duplicate window for submissions (Nats-Msg-Id = job id)")
	cmd.Flags().IntVar(&s.maxRetry, "max-retry", 3, "queue retries of a job after infrastructure failures")
	cmd.Flags().Int64Var(&s.jobsMaxBytes, "jobs-max-bytes", results.DefaultJobsMaxBytes, "size cap of the submissions stream; when full, submits are refused (client.ErrStreamFull) and nothing accepted is dropped")
	cmd.Flags().Int64Var(&s.storedMaxBytes, "tenant-max-stored-bytes", results.DefaultStoredMaxBytes, "each tenant's quota of kept output and artifacts (and, apart, of uploads): the size of its buckets; when full, output is not kept (with a note) and keep/artifacts jobs are rejected")
	cmd.Flags().Int64Var(&s.outputMaxBytes, "tenant-live-output-bytes", results.DefaultOutputMaxBytes, "size of each tenant's live output stream (1 h of chunks; the oldest leave first)")
	cmd.Flags().Int64Var(&s.resultsMaxBytes, "results-max-bytes", results.DefaultResultsMaxBytes, "size cap of each tenant's results stream; when full, the tenant's oldest results leave NATS first (Redis keeps them)")
	cmd.Flags().IntVar(&s.maxResultBytes, "max-result-bytes", results.DefaultMaxResultBytes, "bound of one stored result's JSON (escaping counted); larger outputs are cut in the middle")
	cmd.Flags().IntVar(&s.maxRunning, "tenant-max-running", 64, "a tenant's jobs in the queue or running at once when its record sets no max-running")
	cmd.Flags().StringVar(&s.slots, "slots", "auto", "jobs this scheduler keeps in the queue or running over all tenants; waiting tenants take freed slots in turn (fair share). auto: the fleet's job slots (the workers' concurrency) shared among the schedulers, every 10 s; or a number; 0: no bound, one FIFO queue")
}

// check refuses a retention shorter than what it protects. Every key of a
// job (its run counter and fence, its task, its result) has this
// retention, so it must outlast the job's every try at the longest job
// timeout (maxJobTimeout, the --max-job-timeout cap); and a duplicate id
// dropped within --dedupe-window must still find its result.
func (s *schedFlags) check(maxJobTimeout time.Duration) error {
	life := time.Duration(max(s.maxRetry, 0)+1) * maxJobTimeout
	switch {
	case s.resultRetention < life:
		return fmt.Errorf("--result-retention %s is shorter than a job can live (--max-retry %d + 1 tries × --max-job-timeout %s = %s): "+
			"a job's run count and fence would expire while it runs; raise --result-retention or lower the others", s.resultRetention, s.maxRetry, maxJobTimeout, life)
	case s.resultRetention < s.dedupeWindow:
		return fmt.Errorf("--result-retention %s is shorter than --dedupe-window %s: a resubmission the window drops would find no result; "+
			"raise --result-retention or lower --dedupe-window", s.resultRetention, s.dedupeWindow)
	}
	return nil
}

// streams is the size of the JetStream streams the flags ask for, with
// replicas (--replicas; 0: new streams get 1, existing ones keep theirs).
func (s *schedFlags) streams(replicas int) results.StreamConfig {
	return results.StreamConfig{ResultRetention: s.resultRetention, DedupeWindow: s.dedupeWindow, Replicas: replicas,
		JobsMaxBytes: s.jobsMaxBytes, ResultsMaxBytes: s.resultsMaxBytes,
		Stores: results.StoreQuota{StoredMaxBytes: s.storedMaxBytes, OutputMaxBytes: s.outputMaxBytes}}
}

// stack is the set of connections a service holds.
type stack struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	rdb     *redis.Client
	st      *results.Store
	streams results.StreamConfig // as openStack made them (newScheduler makes the tenants' so)
	closers []func()             // run first by close, in order
}

// openStack connects a service to NATS (with creds; "" = --creds) and
// Redis, and makes sure the results stream exists.
func openStack(ctx context.Context, g *globals, sf *schedFlags, name, creds string) (*stack, error) {
	if creds == "" {
		creds = g.auth.creds
	}
	nc, err := g.connectAs(ctx, name, creds, "")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	rdb, err := connectRedis(ctx, g, g.redisURL)
	if err != nil {
		nc.Close()
		return nil, err
	}
	streams := sf.streams(g.replicas)
	if err := ensureFleetStreams(ctx, js, streams, g.logger); err != nil {
		nc.Close()
		rdb.Close()
		return nil, err
	}
	st := results.NewStore(rdb, js, results.StoreConfig{Retention: sf.resultRetention, MaxResultBytes: sf.maxResultBytes, Logger: g.logger})
	return &stack{nc: nc, js: js, rdb: rdb, st: st, streams: streams}, nil
}

func (s *stack) close() {
	for _, c := range s.closers {
		c()
	}
	s.nc.Drain()
	s.rdb.Close()
}

func newScheduler(ctx context.Context, s *stack, sf *schedFlags, cf *capsFlags, obs *observability, log *slog.Logger) (*scheduler.Scheduler, error) {
	tenants, err := newRegistryTenants(ctx, s.nc, log)
	if err != nil {
		return nil, err
	}
	if n, err := results.MigrateLegacyJobs(ctx, s.js); err != nil {
		return nil, err
	} else if n > 0 {
		log.Info("moved the backlog of the pre-tenant submissions stream to the default tenant's", "stream", results.LegacyJobsStream, "submissions", n)
	}
	slots, auto, err := parseSlots(sf.slots)
	if err != nil {
		return nil, err
	}
	p, err := startPresence(ctx, s.rdb, worker.DefaultID())
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, p.stop)
	var autoSlots func(context.Context) (int, error)
	if auto {
		autoSlots = fleetSlots(s.rdb, asynq.NewInspectorFromRedisClient(s.rdb))
	}
	fb, err := cf.loadBroker(ctx, false, nil, obs, log)
	if err != nil {
		return nil, err
	}
	ac := asynq.NewClientFromRedisClient(s.rdb)
	// Queue gauges cost Redis calls per scrape: the schedulers export them,
	// not every worker.
	if _, err := telemetry.RegisterQueueGauges(obs.provider.MeterProvider().Meter("github.com/paddockhq/paddock"),
		asynq.NewInspectorFromRedisClient(s.rdb)); err != nil {
		return nil, err
	}
	return scheduler.New(s.js, ac, s.st, scheduler.Config{Caps: cf.caps(), Concurrency: sf.concurrency,
		MaxRetry: sf.maxRetry, TaskRetention: sf.resultRetention, Logger: log, Metrics: obs.metrics,
		Tracer: obs.provider.TracerProvider().Tracer(scheduler.TracerName), Tenants: tenants,
		MaxRunning: sf.maxRunning, Slots: slots, AutoSlots: autoSlots, Streams: s.streams, Grants: fb.checker(),
		Tasks: asynqx.LostTasks{Store: s.st, RDB: s.rdb}})
}

// readiness checks that a service's NATS connection and Redis answer.
func (s *stack) readiness(ctx context.Context) error {
	if !s.nc.IsConnected() {
		return fmt.Errorf("NATS %s", s.nc.Status())
	}
	return s.rdb.Ping(ctx).Err()
}

func schedulerCmd(g *globals) *cobra.Command {
	var sf schedFlags
	var cf capsFlags
	var of obsFlags
	var pf periodicFlags
	var bf benchFlags
	cmd := &cobra.Command{
		Use:     "scheduler",
		Short:   "Validate submissions from JetStream and enqueue them in Redis (run any number)",
		PreRunE: func(*cobra.Command, []string) error { return checkStart(g, &cf, &sf, nil) },
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			stopProfile, err := bf.startProfile() // bench.go
			if err != nil {
				return err
			}
			defer stopProfile()
			s, err := openStack(ctx, g, &sf, "paddock-scheduler", "")
			if err != nil {
				return err
			}
			defer s.close()
			obs, err := startObservability(ctx, g, &of, "paddock-scheduler", s.readiness)
			if err != nil {
				return err
			}
			defer obs.stop()
			s.st.SetMetrics(obs.metrics)
			sch, err := newScheduler(ctx, s, &sf, &cf, obs, g.logger)
			if err != nil {
				return err
			}
			if err := sch.Start(ctx); err != nil {
				return err
			}
			stopControl, err := startControl(ctx, s, &cf, &pf, g.logger) // control.go: cancel, periodic jobs
			if err != nil {
				sch.Stop()
				return err
			}
			defer startFailWatch(ctx, s.rdb, s.nc, s.js, obs, g.logger)() // fleet.go: failovers seen
			g.logger.Info("scheduler running", "nats", redact.URL(g.natsURL), "redis", redact.URL(g.redisURL))
			<-ctx.Done()
			g.logger.Info("scheduler stopping: finishing in-flight submissions")
			stopControl()
			sch.Stop()
			return nil
		},
	}
	sf.register(cmd)
	registerReplicas(cmd.Flags(), g)
	cf.register(cmd.Flags())
	of.register(cmd.Flags())
	pf.register(cmd.Flags())
	bf.register(cmd.Flags(), false)
	return cmd
}

func workerCmd(g *globals) *cobra.Command {
	var sf schedFlags
	var cf capsFlags
	var wf workerFlags
	var of obsFlags
	var df debugFlags
	cmd := &cobra.Command{
		Use:     "worker",
		Short:   "Run jobs from the queue in fresh sandbox containers (run any number, on any host)",
		PreRunE: func(*cobra.Command, []string) error { return checkWorkerStart(g, &cf, &sf, &wf) },
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			stopProfile, err := wf.bench.startProfile() // bench.go
			if err != nil {
				return err
			}
			defer stopProfile()
			d, closeDocker, err := wf.bench.docker(ctx) // none with --noop-executor
			if err != nil {
				return err
			}
			defer closeDocker()
			s, err := openStack(ctx, g, &sf, "paddock-worker", "")
			if err != nil {
				return err
			}
			defer s.close()
			obs, err := startObservability(ctx, g, &of, "paddock-worker", s.readiness)
			if err != nil {
				return err
			}
			defer obs.stop()
			dbg, err := startDebug(&df, g.logger) // debug.go: pprof on loopback
			if err != nil {
				return err
			}
			defer dbg.stop()
			s.st.SetMetrics(obs.metrics)
			w, err := newWorker(ctx, s.rdb, s.js, d, s.st, &wf, &cf, obs, g.logger)
			if err != nil {
				return err
			}
			if err := w.Start(ctx); err != nil {
				return err
			}
			defer startFailWatch(ctx, s.rdb, s.nc, nil, obs, g.logger)() // fleet.go: Redis failovers seen
			g.logger.Info("worker running", "concurrency", wf.concurrency, "pool_size", wf.poolSize)
			<-ctx.Done()
			g.logger.Info("worker draining", "grace", wf.shutdownTimeout)
			w.Stop()
			return nil
		},
	}
	sf.register(cmd)
	registerReplicas(cmd.Flags(), g)
	cf.register(cmd.Flags())
	wf.register(cmd.Flags())
	wf.bench.register(cmd.Flags(), true)
	df.register(cmd.Flags())
	of.register(cmd.Flags())
	return cmd
}

// upFlags are the flags of `paddock up`.
type upFlags struct {
	sf                 schedFlags
	cf                 capsFlags
	wf                 workerFlags
	of                 obsFlags
	pf                 periodicFlags
	gf                 gatewayFlags
	dataDir, readyFile string
	gatewayURL         string
	auth               *devstack.Auth
}

func upCmd(g *globals) *cobra.Command {
	var f upFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole stack in one process: NATS, Redis, scheduler, a worker and the gateway (for development and demos)",
		Long: `up uses NATS at --nats-url and Redis at --redis-url when they answer; otherwise it
starts an embedded NATS server with JetStream and a redis-server child (AOF on)
on those addresses, with their data under --data-dir. Shared volumes are served
from <data-dir>/volumes unless --volume-root says otherwise. Then it runs a
scheduler, a worker and the gateway (HTTP API and MCP on --gateway-addr, the dev
tenant's bearer token in <data-dir>/auth/dev.token) until interrupted, and shuts
down in order: stop the gateway and intake, drain running jobs, stop the
services it started.`,
		PreRunE: func(*cobra.Command, []string) error { return checkStart(g, &f.cf, &f.sf, &f.wf) },
		RunE:    func(cmd *cobra.Command, _ []string) error { return runUp(cmd.Context(), g, &f) },
	}
	f.sf.register(cmd)
	registerReplicas(cmd.Flags(), g)
	f.cf.register(cmd.Flags())
	f.wf.register(cmd.Flags())
	f.of.register(cmd.Flags())
	f.pf.register(cmd.Flags())
	f.gf.register(cmd.Flags())
	cmd.Flags().StringVar(&f.readyFile, "ready-file", "", "write this file once the stack accepts jobs: a line \"ready\", then nats=, redis= and gateway= URLs (port 0 in a flag is the port picked; for scripts)")
	return cmd
}

// runUp runs the stack until ctx ends. Each step's deferred cleanup undoes
// it, in reverse order.
func runUp(ctx context.Context, g *globals, f *upFlags) error {
	d, err := connectDocker(ctx)
	if err != nil {
		return err
	}
	defer d.Close()
	f.dataDir = g.dataDirPath()
	if f.auth, err = devstack.LoadOrCreateAuth(f.dataDir); err != nil {
		return err
	}
	stopServices, err := startDevServices(ctx, g, f)
	if err != nil {
		return err
	}
	defer stopServices()
	s, err := openStack(ctx, g, &f.sf, "paddock-up", f.auth.SchedulerCreds)
	if err != nil {
		return err
	}
	defer s.close()
	if f.of.spanFile == "" {
		f.of.spanFile = filepath.Join(f.dataDir, "spans.jsonl")
	}
	obs, err := startObservability(ctx, g, &f.of, "paddock", s.readiness)
	if err != nil {
		return err
	}
	defer obs.stop()
	s.st.SetMetrics(obs.metrics)
	if err := f.volumes(); err != nil {
		return err
	}
	t0 := time.Now()
	stop, err := startServices(ctx, g, s, d, f, obs, g.logger)
	if err != nil {
		return err
	}
	stopGateway, err := startUpGateway(ctx, g, f, g.logger)
	if err != nil {
		stop()
		return err
	}
	fmt.Fprintf(g.stderr, "paddock: up in %s — NATS %s, Redis %s, worker concurrency %d, warm pool %d, volumes in %s\n"+
		"paddock: submit with: paddock%s submit --wait -- 'echo hi'   (as tenant dev; Ctrl-C stops)\n",
		time.Since(t0).Round(time.Millisecond), redact.URL(g.natsURL), redact.URL(g.redisURL), f.wf.concurrency, f.wf.poolSize, f.wf.volumeRoot,
		dataDirHint(f.dataDir))
	if f.readyFile != "" {
		_ = os.WriteFile(f.readyFile, []byte(readyText(g, f)), 0o644)
		defer os.Remove(f.readyFile)
	}
	<-ctx.Done()
	fmt.Fprintln(g.stderr, "paddock: stopping: the gateway, the scheduler, then draining the worker")
	stopGateway()
	stop()
	return nil
}

// readyText is the --ready-file: "ready", then where the stack listens,
// one "name=URL" line each (port 0 in a flag is the port picked), so that
// a script can start up on free ports without racing anyone for them.
// The Redis URL goes without its password: the file is world-readable.
func readyText(g *globals, f *upFlags) string {
	return "ready\nnats=" + redact.URL(g.natsURL) + "\nredis=" + redact.URL(g.redisURL) + "\ngateway=" + f.gatewayURL + "\n"
}

// volumes serves shared volumes from --volume-root, by default
// <data-dir>/volumes, so a newcomer's volume job runs as it is.
func (f *upFlags) volumes() error {
	if f.wf.volumeRoot == "" {
		f.wf.volumeRoot = filepath.Join(f.dataDir, "volumes")
	}
	if err := os.MkdirAll(f.wf.volumeRoot, 0o755); err != nil {
		return fmt.Errorf("--volume-root: %w", err)
	}
	f.cf.volumes = true
	return nil
}

// startDevServices starts NATS and Redis under the data dir unless they
// answer at their URLs already, both authenticated with the generated
// credentials (f.auth); the function it returns stops what it started.
// A Redis URL without credentials gets the generated ones.
func startDevServices(ctx context.Context, g *globals, f *upFlags) (func(), error) {
	if g.auth.redisPasswordFile == "" {
		u, err := f.auth.WithRedisAuth(g.redisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		g.redisURL = u
	}
	s, err := devstack.Ensure(ctx, devstack.EnsureConfig{NATSURL: g.natsURL, RedisURL: g.redisURL, DataDir: f.dataDir,
		Auth: f.auth, Logger: g.logger, PingRedis: func(ctx context.Context, url string) error {
			rdb, err := connectRedis(ctx, g, url)
			if err == nil {
				rdb.Close()
			}
			return err
		}})
	if err != nil {
		return nil, err
	}
	g.natsURL, g.redisURL = s.NATSURL, s.RedisURL // with the ports picked for port 0
	return s.Stop, nil
}

// startServices starts the worker, the scheduler and the control loops
// (control.go: cancel, periodic jobs). The function it returns stops them
// in shutdown order: stop intake (scheduler), drain running jobs (worker).
func startServices(ctx context.Context, g *globals, s *stack, d *dockerclient.Client, f *upFlags, obs *observability, log *slog.Logger) (func(), error) {
	if err := upTenants(ctx, g, s, f.auth, log); err != nil {
		return nil, err
	}
	sch, err := newScheduler(ctx, s, &f.sf, &f.cf, obs, log)
	if err != nil {
		return nil, err
	}
	// The worker's agent I/O (output objects, input files) goes over a
	// connection of its own, with the worker's credentials.
	wnc, err := g.connectAs(ctx, "paddock-up-worker", f.auth.WorkerCreds, "")
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = wnc.Drain() })
	wjs, err := jetstream.New(wnc)
	if err != nil {
		return nil, err
	}
	w, err := newWorker(ctx, s.rdb, wjs, d, s.st, &f.wf, &f.cf, obs, log)
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	if err := sch.Start(ctx); err != nil {
		w.Stop()
		return nil, err
	}
	stopControl, err := startControl(ctx, s, &f.cf, &f.pf, log)
	if err != nil {
		sch.Stop()
		w.Stop()
		return nil, err
	}
	stopWatch := startFailWatch(ctx, s.rdb, s.nc, s.js, obs, log) // fleet.go: failovers seen
	return func() { stopWatch(); stopControl(); sch.Stop(); w.Stop() }, nil
}

// dataDirHint is the --data-dir a client needs to find this stack's
// credentials, when it is not the default.
func dataDirHint(dir string) string {
	if dir == devstack.DefaultDataDir() || os.Getenv("PADDOCK_DATA_DIR") == dir {
		return ""
	}
	return " --data-dir " + dir
}
