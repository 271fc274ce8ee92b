package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

var initPath string

// wrapDocker, when set by a (non-parallel) test, wraps the real Docker
// client of the next stack to inject faults.
var wrapDocker func(sandbox.DockerClient) sandbox.DockerClient

func TestMain(m *testing.M) { testsvc.InitMain(m, &initPath) }

// stack is a whole Paddock fleet in one test: embedded NATS, a private
// redis-server, a scheduler, a worker on the real Docker engine, a client.
type stack struct {
	t      *testing.T
	docker *client.Client
	nc     *nats.Conn
	js     jetstream.JetStream
	client *pclient.Client
	store  *results.Store
	worker *worker.Worker
	owner  string
	rdb    *redis.Client
}

func (s *stack) redisClient() *redis.Client { return s.rdb }

func newStack(t *testing.T, mod func(*worker.Config)) *stack {
	return newStackRedis(t, func(c *worker.Config, _ *redis.Client) {
		if mod != nil {
			mod(c)
		}
	})
}

// newStackSandbox is newStack with the sandbox runtime's config
// (worker.Config.Sandbox) changed by smod too.
func newStackSandbox(t *testing.T, mod func(*worker.Config), smod func(*sandbox.Config)) *stack {
	return newStackRedis(t, func(c *worker.Config, _ *redis.Client) {
		if mod != nil {
			mod(c)
		}
		if smod != nil {
			smod(&c.Sandbox)
		}
	})
}

func newStackRedis(t *testing.T, mod func(*worker.Config, *redis.Client)) *stack {
	t.Helper()
	d := testsvc.Docker(t)
	testsvc.RequireImage(t, d, testsvc.TestImage)
	ns := testsvc.StartNATS(t)
	rs := testsvc.StartRedis(t)
	ctx := context.Background()

	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	store := results.NewStore(rdb, js, results.StoreConfig{})

	caps := job.Caps{Images: []string{testsvc.TestImage}, DefaultMemoryMB: 64, DefaultPids: 32, DefaultTmpfsMB: 16}
	owner := testsvc.Unique("w")
	// Agent I/O is on, as in every real fleet (worker.Build makes it over
	// js): every job's output streams live through the tenant's output
	// stream.
	cfg := worker.Config{ID: owner, Caps: caps, Concurrency: 2, ShutdownTimeout: 5 * time.Second,
		Sandbox: sandbox.Config{InitPath: initPath, PoolSize: 1}}
	if mod != nil {
		mod(&cfg, rdb)
	}
	caps.Volumes = cfg.Volumes != nil
	ac := asynq.NewClientFromRedisClient(rdb)
	scfg := scheduler.Config{Caps: caps}
	ccfg := pclient.Config{}
	if cfg.TracerProvider != nil {
		scfg.Tracer = cfg.TracerProvider.Tracer(scheduler.TracerName)
		ccfg.Tracer = cfg.TracerProvider.Tracer(pclient.TracerName)
	}
	sch, err := scheduler.New(js, ac, store, scfg)
	require.NoError(t, err)
	require.NoError(t, sch.Start(ctx))
	t.Cleanup(sch.Stop)

	var dc sandbox.DockerClient = d
	if wrapDocker != nil {
		dc = wrapDocker(d)
	}
	w, err := worker.Build(ctx, rdb, dc, js, store, cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	require.NoError(t, w.Start(ctx)) // idempotent
	t.Cleanup(func() {
		w.Stop()
		w.Stop()
		requireNoContainers(t, d, owner)
	})
	c, err := pclient.New(nc, ccfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &stack{t: t, docker: d, nc: nc, js: js, client: c, store: store, worker: w, owner: owner, rdb: rdb}
}

func requireNoContainers(t *testing.T, d *client.Client, owner string) {
	t.Helper()
	require.Eventually(t, func() bool {
		list, err := d.ContainerList(context.Background(), client.ContainerListOptions{
			All: true, Filters: make(client.Filters).Add("label", sandbox.LabelOwner+"="+owner)})
		return err == nil && len(list.Items) == 0
	}, 30*time.Second, 50*time.Millisecond, "containers of %s survived", owner)
}

func (s *stack) run(spec job.Spec) job.Result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub, err := s.client.Submit(ctx, spec)
	require.NoError(s.t, err)
	res, err := s.client.Wait(ctx, sub.ID)
	require.NoError(s.t, err)
	return res
}

func TestEndToEnd(t *testing.T) {
	t.Setenv("PADDOCK_WORKER_CANARY", "canary-c0ffee")
	s := newStack(t, nil)

	t.Run("success", func(t *testing.T) {
		r := s.run(job.Spec{Command: "echo hi; echo $GREETING", Env: map[string]string{"GREETING": "hello"}})
		assert.Equal(t, job.StateSucceeded, r.State)
		assert.Equal(t, job.ReasonOK, r.Reason)
		require.NotNil(t, r.ExitCode)
		assert.Equal(t, 0, *r.ExitCode)
		assert.Equal(t, "hi\nhello\n", r.Stdout.Text)
		assert.Equal(t, s.owner, r.Worker)
		assert.Equal(t, testsvc.TestImage, r.Image)
		assert.Equal(t, 1, r.Runs)
		require.Len(t, r.Attempts, 1)
		assert.Equal(t, job.ActionInitial, r.Attempts[0].Action)
		assert.False(t, r.SubmittedAt.IsZero())
		assert.False(t, r.QueuedAt.IsZero())
		assert.False(t, r.FinishedAt.Before(r.StartedAt))
		assert.False(t, r.StartedAt.Before(r.QueuedAt))
	})
	t.Run("non-zero exit", func(t *testing.T) {
		r := s.run(job.Spec{Command: "echo bad >&2; exit 7"})
		assert.Equal(t, job.StateFailed, r.State)
		assert.Equal(t, job.ReasonExitNonzero, r.Reason)
		require.NotNil(t, r.ExitCode)
		assert.Equal(t, 7, *r.ExitCode)
		assert.Equal(t, "bad\n", r.Stderr.Text)
		assert.Equal(t, "bad\n", r.Attempts[0].StderrTail)
	})
	t.Run("worker env never visible", func(t *testing.T) {
		r := s.run(job.Spec{Command: "env; cat /proc/1/environ | tr '\\0' '\\n'"})
		assert.NotContains(t, r.Stdout.Text+r.Stderr.Text, "canary-c0ffee")
		assert.Contains(t, r.Stdout.Text, "PADDOCK_JOB_ID="+r.ID)
	})
	t.Run("timeout", func(t *testing.T) {
		one := int64(1)
		r := s.run(job.Spec{Command: "sleep 30 & sleep 30", Limits: job.Limits{CommandTimeoutS: &one}})
		assert.Equal(t, job.ReasonTimeout, r.Reason)
		assert.Contains(t, r.Error, "timeout")
	})
	t.Run("job deadline", func(t *testing.T) {
		two := int64(2)
		r := s.run(job.Spec{Command: "sleep 30", Limits: job.Limits{CommandTimeoutS: &two, JobTimeoutS: &two}})
		assert.Equal(t, job.ReasonTimeout, r.Reason)
	})
	t.Run("rejected never reaches a container", func(t *testing.T) {
		big := int64(1 << 40)
		r := s.run(job.Spec{Command: "echo never", Image: "alpine:latest", Limits: job.Limits{MemoryMB: &big}})
		assert.Equal(t, job.StateRejected, r.State)
		fields := map[string]bool{}
		for _, fe := range r.Errors {
			fields[fe.Field] = true
		}
		assert.True(t, fields["image"], "errors: %+v", r.Errors)
		assert.True(t, fields["limits.memory_mb"], "errors: %+v", r.Errors)
		assert.Empty(t, r.Attempts)
		assert.Zero(t, r.Runs)
	})
}

func TestDuplicateSubmissionsRunOnce(t *testing.T) {
	s := newStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := testsvc.Unique("dup")
	// Each run appends to a counter nobody else writes: the result's Runs
	// and the single stored result prove one run.
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.client.Submit(ctx, job.Spec{ID: id, Command: "echo once"})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	r, err := s.client.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, job.StateSucceeded, r.State)
	assert.Equal(t, 1, r.Runs)
	// Later duplicates are answered from the stored result, not run again.
	sub, err := s.client.Submit(ctx, job.Spec{ID: id, Command: "echo twice"})
	require.NoError(t, err)
	assert.Equal(t, id, sub.ID)
	// A positive witness that the duplicate had its chance: a job
	// submitted after it, through the same intake in order, has finished.
	w, err := s.client.Submit(ctx, job.Spec{ID: testsvc.Unique("witness"), Command: "echo witness"})
	require.NoError(t, err)
	_, err = s.client.Wait(ctx, w.ID)
	require.NoError(t, err)
	again, err := s.store.Get(ctx, job.Key("", id))
	require.NoError(t, err)
	assert.Equal(t, "once\n", again.Stdout.Text)
	assert.Equal(t, 1, again.Runs)
}

func TestBatch(t *testing.T) {
	s := newStack(t, func(c *worker.Config) { c.Concurrency = 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 24
	specs := make([]job.Spec, n)
	for i := range specs {
		specs[i] = job.Spec{Command: fmt.Sprintf("echo job-%d", i)}
		if i%6 == 5 {
			specs[i].Command = fmt.Sprintf("echo job-%d; exit 3", i)
		}
	}
	subs, err := s.client.SubmitBatch(ctx, specs, nil)
	require.NoError(t, err)
	ids := make([]string, n)
	for i, sub := range subs {
		ids[i] = sub.ID
	}
	rs, err := s.client.WaitAll(ctx, ids, nil)
	require.NoError(t, err)
	require.Len(t, rs, n)
	failed := 0
	for i, r := range rs {
		assert.Equal(t, ids[i], r.ID)
		assert.True(t, strings.HasPrefix(r.Stdout.Text, fmt.Sprintf("job-%d\n", i)), "job %d: %q", i, r.Stdout.Text)
		if r.State == job.StateFailed {
			failed++
		}
	}
	assert.Equal(t, n/6, failed)
}
