package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// TestMain checks that no test leaves a goroutine behind, but one of
// nats.go v1.55's own: jetstream's first async publish starts
// resetPendingAcksOnReconnect, which reads the status channel under the
// publisher's lock; when the connection closes first (cleanupReplySub sets
// the channel to nil) it waits on a nil channel forever. Seen in about 1
// run in 5 of a subset of this package's I/O tests; no Paddock code can
// stop it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

const wait = 30 * time.Second

// setup is one test's NATS server (with or without the streams) and a
// client on it.
type setup struct {
	t      testing.TB
	nats   *testsvc.NATS
	nc     *nats.Conn
	js     jetstream.JetStream
	client *client.Client
}

func newSetup(t testing.TB, streams bool, cfg client.Config) *setup {
	t.Helper()
	s := &setup{t: t, nats: testsvc.StartNATS(t)}
	var err error
	s.nc, err = nats.Connect(s.nats.URL, nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(s.nc.Close)
	s.js, err = jetstream.New(s.nc)
	require.NoError(t, err)
	if streams {
		require.NoError(t, results.EnsureStreams(context.Background(), s.js, results.StreamConfig{}))
	}
	s.client, err = client.New(s.nc, cfg)
	require.NoError(t, err)
	t.Cleanup(s.client.Close)
	return s
}

// stored returns the submission stored at seq in the client's tenant's
// stream.
func (s *setup) stored(seq uint64) *jetstream.RawStreamMsg {
	s.t.Helper()
	st, err := s.js.Stream(context.Background(), job.JobsStream(s.client.Tenant()))
	require.NoError(s.t, err)
	msg, err := st.GetMsg(context.Background(), seq)
	require.NoError(s.t, err)
	return msg
}

// finish publishes a terminal result of the client's tenant as
// results.Store does.
func (s *setup) finish(id string, reason job.Reason) job.Result {
	s.t.Helper()
	return finishAs(s.t, s.js, s.client.Tenant(), id, reason)
}

// finishAs publishes a terminal result of tenant's job id as results.Store
// does, and returns it as the client reads it.
func finishAs(t testing.TB, js jetstream.JetStream, tenant, id string, reason job.Reason) job.Result {
	t.Helper()
	r := job.Result{ID: id, Tenant: tenant, Worker: "w-" + tenant, FinishedAt: time.Now().UTC().Truncate(time.Millisecond)}
	r.Finish(reason)
	data, err := json.Marshal(r)
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), job.ResultSubject(tenant, id), data, jetstream.WithMsgID("result-"+job.Key(tenant, id)))
	require.NoError(t, err)
	return r
}

// waiters is the number of subscriptions s.nc holds on the results of the
// client's tenant (one per Wait or WaitAll in progress).
func (s *setup) waiters() int {
	s.t.Helper()
	return subscriptions(s.t, s.nats.Server, s.nc, job.ResultSubjects(s.client.Tenant()))
}

// subscriptions is the number of subscriptions nc holds on subject, as
// srv sees them.
func subscriptions(t testing.TB, srv *server.Server, nc *nats.Conn, subject string) int {
	t.Helper()
	cid, err := nc.GetClientID()
	if err != nil {
		return 0 // reconnecting
	}
	cz, err := srv.Connz(&server.ConnzOptions{CID: cid, Subscriptions: true})
	require.NoError(t, err)
	n := 0
	for _, c := range cz.Conns {
		for _, sub := range c.Subs {
			if sub == subject {
				n++
			}
		}
	}
	return n
}

func TestSubmitAssignsIDAndStores(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	before := time.Now().UTC()
	sub, err := s.client.Submit(context.Background(), job.Spec{Command: "echo hi", Labels: map[string]string{"k": "v"}})
	require.NoError(t, err)
	assert.True(t, job.ValidID(sub.ID))
	assert.Len(t, sub.ID, 26)
	assert.False(t, sub.Duplicate)
	assert.Positive(t, sub.Seq)

	msg := s.stored(sub.Seq)
	assert.Equal(t, sub.ID, msg.Header.Get(job.HeaderMsgID))
	spec, err := job.Decode(msg.Data)
	require.NoError(t, err, "the stored document is a strict spec")
	assert.Equal(t, sub.ID, spec.ID)
	assert.Equal(t, job.Version, spec.V)
	assert.Equal(t, "echo hi", spec.Command)
	assert.False(t, spec.SubmittedAt.Before(before.Truncate(time.Millisecond)))
}

func TestSubmitSameIDIsDuplicate(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	first, err := s.client.Submit(context.Background(), job.Spec{ID: "same-1", Command: "echo 1"})
	require.NoError(t, err)
	again, err := s.client.Submit(context.Background(), job.Spec{ID: "same-1", Command: "echo 2"})
	require.NoError(t, err)
	assert.False(t, first.Duplicate)
	assert.True(t, again.Duplicate)
	assert.Equal(t, first.Seq, again.Seq)
}

func TestSubmitRejectsInvalidLocally(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	for name, spec := range map[string]job.Spec{
		"bad id":           {ID: "no spaces", Command: "x"},
		"empty command":    {Command: ""},
		"blank command":    {Command: "  \n"},
		"command too long": {Command: strings.Repeat("x", job.MaxCommandBytes+1)},
		"document too big": {Command: "x", Env: map[string]string{"A": strings.Repeat("y", job.MaxSpecBytes)}},
		"other tenant":     {Command: "x", Tenant: "someone-else"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.client.Submit(context.Background(), spec)
			require.ErrorIs(t, err, job.ErrInvalid)
		})
	}
	st, err := s.js.Stream(context.Background(), job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.Zero(t, st.CachedInfo().State.Msgs, "nothing published")
}

func TestNoStreams(t *testing.T) {
	t.Parallel()
	s := newSetup(t, false, client.Config{})
	ctx := context.Background()
	_, err := s.client.Submit(ctx, job.Spec{Command: "x"})
	require.ErrorIs(t, err, client.ErrNoStream)
	assert.Contains(t, err.Error(), "no stream PADDOCK_JOBS_default: start a scheduler (`paddock up` or `paddock scheduler`)")

	subs, err := s.client.SubmitBatch(ctx, []job.Spec{{Command: "x"}, {Command: "y"}}, nil)
	require.ErrorIs(t, err, client.ErrNoStream)
	for _, sub := range subs {
		assert.ErrorIs(t, sub.Err, client.ErrNoStream)
	}

	_, err = s.client.Get(ctx, "x1")
	require.ErrorIs(t, err, client.ErrNoStream)
	assert.Contains(t, err.Error(), job.ResultsStream(job.DefaultTenant))
	_, err = s.client.Wait(ctx, "x1")
	require.ErrorIs(t, err, client.ErrNoStream)
}

func TestSubmitCarriesTraceContext(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := newSetup(t, true, client.Config{Tracer: tp.Tracer("client"), Propagator: propagation.TraceContext{}})

	sub, err := s.client.Submit(context.Background(), job.Spec{Command: "x"})
	require.NoError(t, err)
	require.Len(t, rec.Ended(), 1)
	span := rec.Ended()[0]
	assert.Equal(t, "paddock.submit", span.Name())
	assert.Equal(t, trace.SpanKindProducer, span.SpanKind())

	msg := s.stored(sub.Seq)
	tp2 := msg.Header.Get("traceparent") // exact lowercase key
	require.NotEmpty(t, tp2, "headers: %v", msg.Header)
	assert.Contains(t, tp2, span.SpanContext().TraceID().String())
	assert.Contains(t, tp2, span.SpanContext().SpanID().String())
	assert.Empty(t, msg.Header.Get("Traceparent"), "no canonicalized key")
}

func TestSubmitBatch(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{BatchWindow: 64})
	specs := make([]job.Spec, 1000)
	for i := range specs {
		specs[i] = job.Spec{Command: fmt.Sprintf("echo %d", i)}
	}
	specs[10].Command = ""
	specs[500].ID = "bad id"
	specs[999].Command = strings.Repeat("x", job.MaxCommandBytes+1)
	var calls []int
	subs, err := s.client.SubmitBatch(context.Background(), specs, func(done, total int) {
		assert.Equal(t, 1000, total)
		calls = append(calls, done)
	})
	var be *client.BatchError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, 3, be.Failed)
	assert.Equal(t, 1000, be.Total)
	require.ErrorIs(t, err, job.ErrInvalid)

	require.Len(t, subs, 1000)
	assert.Len(t, calls, 1000)
	assert.True(t, slices.IsSorted(calls))
	assert.Equal(t, 1000, calls[len(calls)-1])
	var ids []string
	for i, sub := range subs {
		if i == 10 || i == 500 || i == 999 {
			assert.ErrorIs(t, sub.Err, job.ErrInvalid, "item %d", i)
			continue
		}
		require.NoError(t, sub.Err, "item %d", i)
		assert.Positive(t, sub.Seq)
		ids = append(ids, sub.ID)
	}
	assert.True(t, slices.IsSorted(ids), "ids sort in batch order")
	st, err := s.js.Stream(context.Background(), job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.EqualValues(t, 997, st.CachedInfo().State.Msgs)

	// Resubmitting the same specs (same ids) stores nothing new.
	again := make([]job.Spec, 0, len(ids))
	for _, id := range ids {
		again = append(again, job.Spec{ID: id, Command: "echo again"})
	}
	subs, err = s.client.SubmitBatch(context.Background(), again, nil)
	require.NoError(t, err)
	for _, sub := range subs {
		assert.True(t, sub.Duplicate)
	}
}

func TestSubmitBatchCanceled(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	subs, err := s.client.SubmitBatch(ctx, []job.Spec{{Command: "a"}, {Command: "b"}}, nil)
	require.ErrorIs(t, err, context.Canceled)
	for _, sub := range subs {
		assert.ErrorIs(t, sub.Err, context.Canceled)
		assert.True(t, job.ValidID(sub.ID), "ids are assigned, so a retry can reuse them")
	}
}

func TestGetBeforeAndAfter(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	_, err := s.client.Get(context.Background(), "g-1")
	require.ErrorIs(t, err, client.ErrNotFinished)
	want := s.finish("g-1", job.ReasonExitNonzero)
	got, err := s.client.Get(context.Background(), "g-1")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	_, err = s.client.Get(context.Background(), "not valid")
	require.ErrorIs(t, err, job.ErrInvalid)
}

func TestWaitBeforeAndAfter(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	// Finished before the call.
	want := s.finish("w-before", job.ReasonOK)
	got, err := s.client.Wait(ctx, "w-before")
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// Finished after the call.
	type outcome struct {
		r   job.Result
		err error
	}
	ch := make(chan outcome, 1)
	go func() {
		r, err := s.client.Wait(ctx, "w-after")
		ch <- outcome{r, err}
	}()
	require.Eventually(t, func() bool { return s.waiters() > 0 }, wait, time.Millisecond, "Wait is subscribed")
	want = s.finish("w-after", job.ReasonTimeout)
	o := <-ch
	require.NoError(t, o.err)
	assert.Equal(t, want, o.r)
	require.Eventually(t, func() bool { return s.waiters() == 0 }, wait, 10*time.Millisecond, "Wait removes its subscription")
}

func TestWaitRespectsContext(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := s.client.Wait(ctx, "never")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// Wait keeps waiting across a NATS server restart and gets a result
// published after it.
func TestWaitAcrossNATSRestart(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ch := make(chan error, 1)
	go func() {
		_, err := s.client.Wait(ctx, "w-restart")
		ch <- err
	}()
	require.Eventually(t, func() bool { return s.waiters() > 0 }, wait, time.Millisecond)
	s.nats.Restart()
	require.Eventually(t, s.nc.IsConnected, wait, 10*time.Millisecond)
	s.finish("w-restart", job.ReasonOK)
	require.NoError(t, <-ch)
}

func TestWaitAll(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("wa-%03d", i)
	}
	want := map[string]job.Result{}
	for _, id := range ids[:250] {
		want[id] = s.finish(id, job.ReasonOK)
	}
	ask := append(slices.Clone(ids), ids[0], ids[499]) // repeated ids are answered twice

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	type outcome struct {
		rs    []job.Result
		err   error
		calls []int
	}
	ch := make(chan outcome, 1)
	go func() {
		var calls []int
		rs, err := s.client.WaitAll(ctx, ask, func(done, total int) {
			assert.Equal(t, len(ask), total)
			calls = append(calls, done)
		})
		ch <- outcome{rs, err, calls}
	}()
	require.Eventually(t, func() bool { return s.waiters() == 1 }, wait, time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, id := range ids[250:] {
		wg.Go(func() {
			r := s.finish(id, job.ReasonExitNonzero)
			mu.Lock()
			want[id] = r
			mu.Unlock()
		})
	}
	wg.Wait()

	o := <-ch
	require.NoError(t, o.err)
	require.Len(t, o.rs, len(ask))
	for i, id := range ask {
		assert.Equal(t, want[id], o.rs[i], "result %d (%s)", i, id)
	}
	require.NotEmpty(t, o.calls)
	assert.True(t, slices.IsSorted(o.calls))
	assert.Equal(t, len(ask), o.calls[len(o.calls)-1])
	require.Eventually(t, func() bool { return s.waiters() == 0 }, wait, 10*time.Millisecond)
}

func TestWaitAllPartialOnCancel(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	done := s.finish("p-done", job.ReasonOK)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	rs, err := s.client.WaitAll(ctx, []string{"p-done", "p-pending"}, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Len(t, rs, 2)
	assert.Equal(t, done, rs[0])
	assert.Empty(t, rs[1].ID)
}

func TestWaitAllEmptyAndInvalid(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	rs, err := s.client.WaitAll(context.Background(), nil, nil)
	require.NoError(t, err)
	assert.Empty(t, rs)
	_, err = s.client.WaitAll(context.Background(), []string{"ok", "not ok"}, nil)
	require.ErrorIs(t, err, job.ErrInvalid)
}

// The full path: a Store records the result (Redis + NATS) and the client
// reads it.
func TestReadsStoreResults(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	r := testsvc.StartRedis(t)
	rdb := r.Client()
	t.Cleanup(func() { rdb.Close() })
	store := results.NewStore(rdb, s.js, results.StoreConfig{})
	res := job.Result{ID: "st-1", Tenant: job.DefaultTenant, Worker: "w"}
	res.Finish(job.ReasonOOM)
	stored, _, err := store.Record(context.Background(), res)
	require.NoError(t, err)
	got, err := s.client.Get(context.Background(), "st-1")
	require.NoError(t, err)
	assert.Equal(t, stored, got)
}

func TestNewID(t *testing.T) {
	t.Parallel()
	const n = 20000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = client.NewID()
	}
	assert.True(t, slices.IsSorted(ids), "ids from one process increase")
	seen := make(map[string]bool, n)
	for _, id := range ids {
		require.True(t, job.ValidID(id), id)
		require.Len(t, id, 26)
		require.False(t, seen[id], "duplicate %s", id)
		seen[id] = true
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				id := client.NewID()
				mu.Lock()
				assert.False(t, seen[id])
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := client.New(nil, client.Config{})
	require.ErrorIs(t, err, client.ErrConfig)
	s := newSetup(t, false, client.Config{})
	for name, cfg := range map[string]client.Config{
		"negative window":  {BatchWindow: -1},
		"negative timeout": {PublishTimeout: -1},
		"tenant uppercase": {Tenant: "Acme"},
		"tenant dot":       {Tenant: "a.b"},
		"tenant wildcard":  {Tenant: ">"},
		"tenant too long":  {Tenant: strings.Repeat("a", job.MaxTenantLen+1)},
	} {
		_, err = client.New(s.nc, cfg)
		require.ErrorIs(t, err, client.ErrConfig, name)
	}
	c, err := client.New(s.nc, client.Config{})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, job.DefaultTenant, c.Tenant(), "a client without a tenant is the default tenant")
}

// newStore starts a redis-server and returns a results.Store recording on
// s's NATS, as the fleet does.
func (s *setup) newStore() *results.Store {
	s.t.Helper()
	r := testsvc.StartRedis(s.t)
	rdb := r.Client()
	s.t.Cleanup(func() { rdb.Close() })
	return results.NewStore(rdb, s.js, results.StoreConfig{})
}

// Valid ids whose subject must be escaped (an empty '.'-separated token is
// not a valid subject: "a." is published on paddock.results.a~) and usual
// ids next to them, through Get, Wait and WaitAll, before and after the
// result exists.
func TestReadsEscapedIDs(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	store := s.newStore()
	ids := []string{"a.", ".a", ".", "..", "a..b", "a...", ".a.", "a.b", "a", "x-_.y", "-", "_", "A-z_0.9", strings.Repeat(".", 128)}
	for _, id := range ids {
		require.True(t, job.ValidID(id), id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, id := range ids {
		_, err := s.client.Get(ctx, id)
		require.ErrorIs(t, err, client.ErrNotFinished, id)
	}

	// Before: waiting starts before any result exists.
	type outcome struct {
		rs  []job.Result
		err error
	}
	all := make(chan outcome, 1)
	go func() {
		rs, err := s.client.WaitAll(ctx, ids, nil)
		all <- outcome{rs, err}
	}()
	one := make(chan outcome, 1)
	go func() {
		r, err := s.client.Wait(ctx, "a.")
		one <- outcome{[]job.Result{r}, err}
	}()
	require.Eventually(t, func() bool { return s.waiters() == 2 }, wait, time.Millisecond, "both are subscribed")
	want := map[string]job.Result{}
	for _, id := range ids {
		r := job.Result{ID: id, Tenant: job.DefaultTenant, Worker: "w"}
		r.Finish(job.ReasonOK)
		stored, first, err := store.Record(ctx, r)
		require.NoError(t, err)
		require.True(t, first)
		want[id] = stored
	}
	o := <-all
	require.NoError(t, o.err)
	for i, id := range ids {
		assert.Equal(t, want[id], o.rs[i], "WaitAll before: %q", id)
	}
	o = <-one
	require.NoError(t, o.err)
	assert.Equal(t, want["a."], o.rs[0], "Wait before")

	// After: the results exist.
	for _, id := range ids {
		got, err := s.client.Get(ctx, id)
		require.NoError(t, err, id)
		assert.Equal(t, want[id], got, "Get: %q", id)
		got, err = s.client.Wait(ctx, id)
		require.NoError(t, err, id)
		assert.Equal(t, want[id], got, "Wait after: %q", id)
	}
	rs, err := s.client.WaitAll(ctx, ids, nil)
	require.NoError(t, err)
	for i, id := range ids {
		assert.Equal(t, want[id], rs[i], "WaitAll after: %q", id)
	}
}

// A full PADDOCK_JOBS_default refuses submissions with a typed error that says what
// to do, keeps what it accepted, and takes the same spec once it has room.
func TestSubmitStreamFull(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	ctx := context.Background()
	require.NoError(t, results.EnsureStreams(ctx, s.js, results.StreamConfig{JobsMaxBytes: 4 << 10}))
	spec := func(i int) job.Spec {
		return job.Spec{ID: fmt.Sprintf("full-%d", i), Command: "echo " + strings.Repeat("x", 1000)}
	}
	accepted := 0
	var err error
	for i := range 10 {
		if _, err = s.client.Submit(ctx, spec(i)); err != nil {
			break
		}
		accepted++
	}
	require.ErrorIs(t, err, client.ErrStreamFull)
	var full *client.StreamFullError
	require.ErrorAs(t, err, &full)
	assert.Equal(t, job.JobsStream(job.DefaultTenant), full.Stream)
	assert.Equal(t, fmt.Sprintf("full-%d", accepted), full.ID)
	assert.Contains(t, err.Error(), "stream PADDOCK_JOBS_default is full")
	assert.Contains(t, err.Error(), "maximum bytes exceeded", "NATS's reason is kept")
	assert.Contains(t, err.Error(), "--jobs-max-bytes", "the error says what to do")
	assert.False(t, errors.Is(err, client.ErrNoStream))
	assert.False(t, errors.Is(err, client.ErrQuota), "a size limit is not the tenant's quota")
	require.Positive(t, accepted)
	st, err := s.js.Stream(ctx, job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.EqualValues(t, accepted, st.CachedInfo().State.Msgs, "nothing accepted was dropped")

	subs, err := s.client.SubmitBatch(ctx, []job.Spec{spec(100), spec(101)}, nil)
	require.ErrorIs(t, err, client.ErrStreamFull)
	for _, sub := range subs {
		assert.ErrorIs(t, sub.Err, client.ErrStreamFull, sub.ID)
	}

	require.NoError(t, results.EnsureStreams(ctx, s.js, results.StreamConfig{}), "the operator raises the limit")
	sub, err := s.client.Submit(ctx, spec(accepted))
	require.NoError(t, err, "the refused spec can be submitted again")
	assert.False(t, sub.Duplicate, "the refused submission was not stored")
}
