package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// newClient returns another client on s's connection.
func (s *setup) newClient(cfg client.Config) *client.Client {
	s.t.Helper()
	c, err := client.New(s.nc, cfg)
	require.NoError(s.t, err)
	s.t.Cleanup(c.Close)
	return c
}

// addTenant creates tenant's stream of submissions, as the fleet does.
func (s *setup) addTenant(tenant string) {
	s.t.Helper()
	require.NoError(s.t, results.EnsureTenantStream(context.Background(), s.js, results.StreamConfig{}, tenant, 0))
}

// Two tenants may use the same id: each has its own submission, its own
// dedupe, its own result, and neither reads the other's.
func TestTenantsKeptApart(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{Tenant: "acme"})
	s.addTenant("acme")
	s.addTenant("beta")
	beta := s.newClient(client.Config{Tenant: "beta"})
	assert.Equal(t, "acme", s.client.Tenant())
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	subA, err := s.client.Submit(ctx, job.Spec{ID: "build-1", Command: "echo a"})
	require.NoError(t, err)
	subB, err := beta.Submit(ctx, job.Spec{ID: "build-1", Command: "echo b"})
	require.NoError(t, err)
	assert.False(t, subA.Duplicate)
	assert.False(t, subB.Duplicate, "each tenant's stream dedupes on its own")
	for tenant, want := range map[string]string{"acme": "echo a", "beta": "echo b"} {
		st, err := s.js.Stream(ctx, job.JobsStream(tenant))
		require.NoError(t, err)
		msg, err := st.GetLastMsgForSubject(ctx, job.SubmitSubject(tenant))
		require.NoError(t, err)
		spec, err := job.Decode(msg.Data)
		require.NoError(t, err)
		assert.Equal(t, want, spec.Command, tenant)
		assert.Equal(t, "build-1", msg.Header.Get(job.HeaderMsgID))
	}

	// acme's result is acme's only.
	ra := s.finish("build-1", job.ReasonOK)
	got, err := s.client.Get(ctx, "build-1")
	require.NoError(t, err)
	assert.Equal(t, ra, got)
	assert.Equal(t, "acme", got.Tenant)
	_, err = beta.Get(ctx, "build-1")
	require.ErrorIs(t, err, client.ErrNotFinished, "beta does not see acme's result")

	// beta waits; acme's result for the same id arrives first and is not
	// taken, beta's (published after it, on the same connection) is.
	ch := make(chan job.Result, 1)
	go func() {
		r, err := beta.Wait(ctx, "build-2")
		assert.NoError(t, err)
		ch <- r
	}()
	require.Eventually(t, func() bool {
		return subscriptions(t, s.nats.Server, s.nc, job.ResultSubjects("beta")) == 1
	}, wait, time.Millisecond)
	finishAs(t, s.js, "acme", "build-2", job.ReasonOK)
	rb := finishAs(t, s.js, "beta", "build-2", job.ReasonTimeout)
	assert.Equal(t, rb, <-ch)

	// Before and after, through WaitAll.
	rb1 := finishAs(t, s.js, "beta", "build-1", job.ReasonExitNonzero)
	rs, err := beta.WaitAll(ctx, []string{"build-1", "build-2"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []job.Result{rb1, rb}, rs)
	rs, err = s.client.WaitAll(ctx, []string{"build-1", "build-2"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "acme", rs[0].Tenant)
	assert.Equal(t, job.ReasonOK, rs[1].Reason, "acme's build-2, not beta's")
}

// WaitAll of 2,000 ids, half finished before the call and half after.
func TestWaitAllManyBeforeAndAfter(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	const n = 2000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("many-%04d", i)
	}
	want := make(map[string]job.Result, n)
	for _, id := range ids[:n/2] {
		want[id] = s.finish(id, job.ReasonOK)
	}
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
		rs, err := s.client.WaitAll(ctx, ids, func(done, _ int) { calls = append(calls, done) })
		ch <- outcome{rs, err, calls}
	}()
	require.Eventually(t, func() bool { return s.waiters() == 1 }, wait, time.Millisecond)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for chunk := range slices.Chunk(ids[n/2:], n/2/8) {
		wg.Go(func() {
			for _, id := range chunk {
				r := s.finish(id, job.ReasonExitNonzero)
				mu.Lock()
				want[id] = r
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	o := <-ch
	require.NoError(t, o.err)
	for i, id := range ids {
		require.Equal(t, want[id], o.rs[i], "result %d (%s)", i, id)
	}
	assert.True(t, slices.IsSorted(o.calls))
	assert.Equal(t, n, o.calls[len(o.calls)-1])
	require.Eventually(t, func() bool { return s.waiters() == 0 }, wait, 10*time.Millisecond)
}

// A tenant at its max-queued quota (its stream's MaxMsgs) gets a typed
// error that says what to do; nothing is stored, and the same spec goes
// through once a job has left the stream.
func TestSubmitQuota(t *testing.T) {
	t.Parallel()
	const tenant = "quota"
	s := newSetup(t, true, client.Config{Tenant: tenant})
	ctx := context.Background()
	st, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: job.JobsStream(tenant),
		Subjects: []string{job.SubmitSubject(tenant)}, MaxMsgs: 2, Discard: jetstream.DiscardNew,
		Retention: jetstream.WorkQueuePolicy, Duplicates: time.Minute})
	require.NoError(t, err)
	for _, id := range []string{"q-1", "q-2"} {
		_, err := s.client.Submit(ctx, job.Spec{ID: id, Command: "x"})
		require.NoError(t, err)
	}

	_, err = s.client.Submit(ctx, job.Spec{ID: "q-3", Command: "x"})
	require.ErrorIs(t, err, client.ErrQuota)
	var qe *client.QuotaError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, client.QuotaError{Tenant: tenant, Quota: client.QuotaMaxQueued, ID: "q-3", Err: qe.Err}, *qe)
	assert.False(t, errors.Is(err, client.ErrStreamFull), "the quota is not a full stream")
	assert.False(t, errors.Is(err, client.ErrNoStream))
	for _, text := range []string{`tenant "quota"`, "the tenant's max-queued quota", "maximum messages exceeded",
		"once some of them have finished", "paddock tenant set quota --max-queued"} {
		assert.Contains(t, err.Error(), text)
	}

	again, err := s.client.Submit(ctx, job.Spec{ID: "q-1", Command: "x"})
	require.NoError(t, err, "a resubmission of an accepted job is a duplicate, not over quota")
	assert.True(t, again.Duplicate)

	subs, err := s.client.SubmitBatch(ctx, []job.Spec{{ID: "q-4", Command: "x"}, {ID: "q-5", Command: "x"}}, nil)
	require.ErrorIs(t, err, client.ErrQuota)
	for _, sub := range subs {
		assert.ErrorIs(t, sub.Err, client.ErrQuota, sub.ID)
	}

	require.NoError(t, st.DeleteMsg(ctx, 1), "a job finishes: its submission leaves the stream")
	sub, err := s.client.Submit(ctx, job.Spec{ID: "q-3", Command: "x"})
	require.NoError(t, err)
	assert.False(t, sub.Duplicate, "the refused submission was not stored")
}

// gate is a dialer that holds new connections while shut, and says when
// one is held. (nats.go dials with the connection's lock held: while a dial
// is held, no method of the connection returns.)
type gate struct {
	mu   sync.Mutex
	open chan struct{}
	held chan struct{} // receives when a dial is held
}

func newGate() *gate {
	g := &gate{open: make(chan struct{}), held: make(chan struct{}, 1)}
	close(g.open)
	return g
}

func (g *gate) Dial(network, address string) (net.Conn, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	default:
		select {
		case g.held <- struct{}{}:
		default:
		}
		<-open
	}
	return net.Dial(network, address)
}

func (g *gate) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

// A result published while the waiting connection is away (NATS
// restarted; another connection was back first) is only in the stream:
// WaitAll looks the pending ids up again after its reconnect.
func TestWaitAllSeesResultsPublishedWhileDisconnected(t *testing.T) {
	t.Parallel()
	s := newSetup(t, true, client.Config{})
	g := newGate()
	nc, err := nats.Connect(s.nats.URL, nats.SetCustomDialer(g), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	type outcome struct {
		rs  []job.Result
		err error
	}
	ch := make(chan outcome, 1)
	go func() {
		rs, err := c.WaitAll(ctx, []string{"away-1", "away-2"}, nil)
		ch <- outcome{rs, err}
	}()
	require.Eventually(t, func() bool {
		return subscriptions(t, s.nats.Server, nc, job.ResultSubjects(job.DefaultTenant)) == 1
	}, wait, time.Millisecond)
	g.shut()
	s.nats.Restart()
	require.Eventually(t, s.nc.IsConnected, wait, 10*time.Millisecond)
	select {
	case <-g.held: // the waiting connection is away, trying to come back
	case <-ctx.Done():
		t.Fatal("the waiting connection did not try to reconnect")
	}
	r1 := s.finish("away-1", job.ReasonOK)
	g.release()
	require.Eventually(t, nc.IsConnected, wait, 10*time.Millisecond)
	r2 := s.finish("away-2", job.ReasonOK)
	o := <-ch
	require.NoError(t, o.err)
	assert.Equal(t, []job.Result{r1, r2}, o.rs)
}
