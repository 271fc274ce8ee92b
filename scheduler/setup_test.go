package scheduler_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the outage tests cause many.
	redis.SetLogger(discardLogger{})
	goleak.VerifyTestMain(m)
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// wait is the deadline of every poll; generous for -race on two cores.
const wait = 30 * time.Second

var caps = job.Caps{Queues: []string{"default", "other"}}

// setup is one test's services: its own NATS server with the streams, its
// own redis-server, the real asynq client (wrapped to count enqueues) and
// inspector, the results store and the client SDK.
type setup struct {
	t      testing.TB
	nats   *testsvc.NATS
	nc     *nats.Conn
	js     jetstream.JetStream
	redis  *testsvc.Redis
	rdb    *redis.Client
	store  *results.Store
	asynq  *asynq.Client
	insp   *asynq.Inspector
	enq    *countingEnqueuer
	rec    *countingRecorder
	client *client.Client

	mu     sync.Mutex
	scheds []*scheduler.Scheduler // started by s.scheduler
}

func newSetup(t testing.TB) *setup {
	t.Helper()
	s := &setup{t: t, nats: testsvc.StartNATS(t), redis: testsvc.StartRedis(t)}
	var err error
	s.nc, err = nats.Connect(s.nats.URL, nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(s.nc.Close)
	s.js, err = jetstream.New(s.nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(context.Background(), s.js, results.StreamConfig{}))
	s.rdb = s.redis.Client()
	t.Cleanup(func() { s.rdb.Close() })
	s.store = results.NewStore(s.rdb, s.js, results.StoreConfig{Logger: quiet()})
	opt := asynq.RedisClientOpt{Network: s.redis.Network, Addr: s.redis.Addr}
	s.asynq = asynq.NewClient(opt)
	t.Cleanup(func() { s.asynq.Close() })
	s.insp = asynq.NewInspector(opt)
	t.Cleanup(func() { s.insp.Close() })
	s.enq = newCounting(s.asynq)
	s.rec = &countingRecorder{Recorder: s.store, failedGets: map[string]int{}}
	s.client, err = client.New(s.nc, client.Config{Propagator: propagation.TraceContext{}})
	require.NoError(t, err)
	t.Cleanup(s.client.Close)
	return s
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// config is a scheduler config with test-sized delays.
func testConfig() scheduler.Config {
	return scheduler.Config{
		Caps:            caps,
		AckWait:         5 * time.Second,
		BackoffMin:      10 * time.Millisecond,
		BackoffMax:      100 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		Logger:          quiet(),
		Propagator:      propagation.TraceContext{},
		// No worker runs in these tests, so no job ever gets a result and
		// frees its place: the tests that are not about max-running let
		// every job into the queue.
		MaxRunning: 100000,
	}
}

// scheduler returns a started Scheduler using enq, stopped at cleanup.
func (s *setup) scheduler(enq scheduler.Enqueuer, cfg scheduler.Config) *scheduler.Scheduler {
	s.t.Helper()
	sch, err := scheduler.New(s.js, enq, s.rec, cfg)
	require.NoError(s.t, err)
	require.NoError(s.t, sch.Start(context.Background()))
	s.t.Cleanup(sch.Stop)
	s.mu.Lock()
	s.scheds = append(s.scheds, sch)
	s.mu.Unlock()
	return sch
}

// submit publishes a spec through the SDK.
func (s *setup) submit(spec job.Spec) string {
	s.t.Helper()
	sub, err := s.client.Submit(context.Background(), spec)
	require.NoError(s.t, err)
	return sub.ID
}

// publishRaw publishes body as is for the default tenant; msgID, when set,
// becomes Nats-Msg-Id.
func (s *setup) publishRaw(body []byte, msgID string) *jetstream.PubAck {
	s.t.Helper()
	return s.publishAs(job.DefaultTenant, body, msgID)
}

// publishAs publishes body as is on tenant's submit subject.
func (s *setup) publishAs(tenant string, body []byte, msgID string) *jetstream.PubAck {
	s.t.Helper()
	msg := nats.NewMsg(job.SubmitSubject(tenant))
	msg.Data = body
	if msgID != "" {
		msg.Header.Set(job.HeaderMsgID, msgID)
	}
	ack, err := s.js.PublishMsg(context.Background(), msg)
	require.NoError(s.t, err)
	return ack
}

// taskKey is the asynq task id of a default-tenant job id (a key, with
// its '/', is kept).
func taskKey(id string) string {
	if strings.Contains(id, "/") {
		return id
	}
	return job.Key(job.DefaultTenant, id)
}

// task polls until the task id exists in queue.
func (s *setup) task(queue, id string) *asynq.TaskInfo {
	s.t.Helper()
	id = taskKey(id)
	var info *asynq.TaskInfo
	require.Eventually(s.t, func() bool {
		var err error
		info, err = s.insp.GetTaskInfo(queue, id)
		return err == nil
	}, wait, 10*time.Millisecond, "task %s in queue %s", id, queue)
	return info
}

// noTask asserts that no task id exists in queue.
func (s *setup) noTask(queue, id string) {
	s.t.Helper()
	id = taskKey(id)
	_, err := s.insp.GetTaskInfo(queue, id)
	require.Error(s.t, err, "task %s must not exist in %s", id, queue)
	require.True(s.t, errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound), "%v", err)
}

// pending returns the ids of the pending tasks of queue.
func (s *setup) pending(queue string) []string {
	s.t.Helper()
	var ids []string
	for page := 1; ; page++ {
		tasks, err := s.insp.ListPendingTasks(queue, asynq.PageSize(500), asynq.Page(page))
		if errors.Is(err, asynq.ErrQueueNotFound) {
			return nil
		}
		require.NoError(s.t, err)
		for _, ti := range tasks {
			id := ti.ID
			if t, plain, ok := job.SplitKey(id); ok && t == job.DefaultTenant {
				id = plain // the default tenant's ids, as the tests name them
			}
			ids = append(ids, id)
		}
		if len(tasks) < 500 {
			return ids
		}
	}
}

// jobsInStream is the number of submissions not acked yet.
func (s *setup) jobsInStream() uint64 {
	s.t.Helper()
	st, err := s.js.Stream(context.Background(), job.JobsStream(job.DefaultTenant))
	require.NoError(s.t, err)
	return st.CachedInfo().State.Msgs
}

// held is the number of messages the schedulers hold (jobs enqueued and
// not finished: acked with their result).
func (s *setup) held() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sch := range s.scheds {
		n += sch.Held()
	}
	return uint64(n)
}

// drained polls until every submission is acked, or held for its job's
// result (enqueued).
func (s *setup) drained() {
	s.t.Helper()
	require.Eventually(s.t, func() bool { return s.jobsInStream() == s.held() }, wait, 10*time.Millisecond, "every submission acked or held")
}

// result waits for the job's terminal result through the SDK.
func (s *setup) result(id string) job.Result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, err := s.client.Wait(ctx, id)
	require.NoError(s.t, err, "result of %s", id)
	return r
}

// countingEnqueuer wraps the real asynq client: it counts successful
// enqueues per task id and failures, and injects faults.
type countingEnqueuer struct {
	inner scheduler.Enqueuer
	fail  func(id string) error // fault to inject, nil for none

	mu     sync.Mutex
	ok     map[string]int
	failed map[string]int
}

func newCounting(inner scheduler.Enqueuer) *countingEnqueuer {
	return &countingEnqueuer{inner: inner, ok: map[string]int{}, failed: map[string]int{}}
}

func (c *countingEnqueuer) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	var id string
	for _, o := range opts {
		if o.Type() == asynq.TaskIDOpt {
			id = o.Value().(string)
		}
	}
	var err error
	if c.fail != nil {
		_, plain, _ := job.SplitKey(id)
		err = c.fail(plain)
	}
	var info *asynq.TaskInfo
	if err == nil {
		info, err = c.inner.EnqueueContext(ctx, task, opts...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.ok[id]++
	case errors.Is(err, asynq.ErrTaskIDConflict):
	default:
		c.failed[id]++
	}
	return info, err
}

func (c *countingEnqueuer) successes(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok[taskKey(id)]
}

func (c *countingEnqueuer) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.ok {
		n += v
	}
	return n
}

func (c *countingEnqueuer) failuresOf(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed[taskKey(id)]
}

// countingRecorder wraps the real store and counts the failed Get calls
// per id (each is one delivery that could not reach Redis).
type countingRecorder struct {
	scheduler.Recorder
	mu         sync.Mutex
	failedGets map[string]int
}

func (c *countingRecorder) Get(ctx context.Context, id string) (job.Result, error) {
	r, err := c.Recorder.Get(ctx, id)
	if err != nil && !errors.Is(err, results.ErrNotFound) {
		c.mu.Lock()
		c.failedGets[id]++
		c.mu.Unlock()
	}
	return r, err
}

func (c *countingRecorder) failures(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failedGets[taskKey(id)]
}

func (c *countingRecorder) allFailures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.failedGets {
		n += v
	}
	return n
}

func hasField(fields []job.FieldError, name string) bool {
	for _, f := range fields {
		if f.Field == name || strings.HasPrefix(f.Field, name+".") {
			return true
		}
	}
	return false
}
