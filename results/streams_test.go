package results_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

func connect(t *testing.T, n *testsvc.NATS) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(n.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// Several schedulers starting at once all succeed and agree on the streams.
func TestEnsureStreamsConcurrent(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	var wg sync.WaitGroup
	for range 8 {
		js := connect(t, n)
		wg.Go(func() {
			assert.NoError(t, results.EnsureStreams(context.Background(), js, results.StreamConfig{}))
		})
	}
	wg.Wait()

	js := connect(t, n)
	ctx := context.Background()
	jobs, err := js.Stream(ctx, job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	jc := jobs.CachedInfo().Config
	assert.Equal(t, []string{job.SubmitSubject(job.DefaultTenant)}, jc.Subjects)
	assert.Equal(t, jetstream.WorkQueuePolicy, jc.Retention)
	assert.Equal(t, jetstream.FileStorage, jc.Storage)
	assert.Equal(t, results.DefaultDedupeWindow, jc.Duplicates)
	assert.Equal(t, 1, jc.Replicas)
	assert.Equal(t, int64(results.DefaultJobsMaxBytes), jc.MaxBytes)
	assert.Equal(t, jetstream.DiscardNew, jc.Discard, "a full jobs stream refuses, never drops")

	res, err := js.Stream(ctx, job.ResultsStream(job.DefaultTenant))
	require.NoError(t, err)
	rc := res.CachedInfo().Config
	assert.Equal(t, []string{job.ResultSubjects(job.DefaultTenant)}, rc.Subjects)
	assert.Equal(t, int64(1), rc.MaxMsgsPerSubject)
	assert.Equal(t, results.DefaultRetention, rc.MaxAge)
	assert.True(t, rc.AllowDirect)
	assert.Equal(t, jetstream.FileStorage, rc.Storage)
	assert.Equal(t, int64(results.DefaultResultsMaxBytes), rc.MaxBytes)
	assert.Equal(t, jetstream.DiscardOld, rc.Discard)
}

func TestEnsureStreamsUpdates(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	ctx := context.Background()
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}), "idempotent")
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{ResultRetention: time.Hour, DedupeWindow: time.Minute,
		JobsMaxBytes: 64 << 20, ResultsMaxBytes: 32 << 20}))
	res, err := js.Stream(ctx, job.ResultsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.Equal(t, time.Hour, res.CachedInfo().Config.MaxAge)
	assert.Equal(t, int64(32<<20), res.CachedInfo().Config.MaxBytes)
	jobs, err := js.Stream(ctx, job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.Equal(t, time.Minute, jobs.CachedInfo().Config.Duplicates)
	assert.Equal(t, int64(64<<20), jobs.CachedInfo().Config.MaxBytes)
}

func TestEnsureStreamsIncompatibleExisting(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: job.JobsStream(job.DefaultTenant), Subjects: []string{job.SubmitSubject(job.DefaultTenant)}, Retention: jetstream.InterestPolicy})
	require.NoError(t, err)
	err = results.EnsureStreams(ctx, js, results.StreamConfig{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), job.JobsStream(job.DefaultTenant))
}

func TestEnsureStreamsInvalidConfig(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	for _, cfg := range []results.StreamConfig{{Replicas: -1}, {JobsMaxBytes: -1}, {ResultsMaxBytes: -1}} {
		err := results.EnsureStreams(context.Background(), js, cfg)
		require.ErrorIs(t, err, results.ErrConfig, "%+v", cfg)
	}
}

// A full PADDOCK_JOBS refuses a submission (DiscardNew) with an error
// IsStreamFull recognizes, and keeps every submission it accepted.
func TestFullJobsStreamRefuses(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	ctx := context.Background()
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{JobsMaxBytes: 4 << 10}))
	payload := []byte(strings.Repeat("x", 1000))
	accepted := 0
	var err error
	for i := range 10 {
		msg := nats.NewMsg(job.SubmitSubject(job.DefaultTenant))
		msg.Data = payload
		msg.Header.Set(job.HeaderMsgID, fmt.Sprintf("full-%d", i))
		if _, err = js.PublishMsg(ctx, msg, jetstream.WithExpectStream(job.JobsStream(job.DefaultTenant))); err != nil {
			break
		}
		accepted++
	}
	require.Error(t, err, "a 4 KiB stream cannot take 10 KB")
	assert.True(t, results.IsStreamFull(err), "%v", err)
	assert.Positive(t, accepted)
	st, err := js.Stream(ctx, job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.EqualValues(t, accepted, st.CachedInfo().State.Msgs, "nothing accepted was dropped")
}

func TestIsStreamFullOtherErrors(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	ctx := context.Background()
	_, notFound := js.Stream(ctx, "NOPE")
	require.Error(t, notFound)
	_, noStream := js.Publish(ctx, "nobody.stores.this", []byte("x"))
	require.Error(t, noStream)
	for _, err := range []error{nil, errors.New("maximum bytes exceeded"), notFound, noStream} {
		assert.False(t, results.IsStreamFull(err), "%v", err)
	}
}

// A fleet from before tenants upgrades without losing its backlog: the
// old PADDOCK_JOBS stream's submissions move to the default tenant's.
func TestMigrateLegacyJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js := connect(t, testsvc.StartNATS(t))
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	n, err := results.MigrateLegacyJobs(ctx, js)
	require.NoError(t, err)
	assert.Zero(t, n, "no legacy stream: nothing to do")

	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: results.LegacyJobsStream, Subjects: []string{"paddock.jobs.submit"},
		Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	for i := range 3 {
		msg := nats.NewMsg("paddock.jobs.submit")
		msg.Data = fmt.Appendf(nil, `{"id":"old-%d","command":"echo %d"}`, i, i)
		msg.Header.Set(job.HeaderMsgID, fmt.Sprint("old-", i))
		_, err := js.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	n, err = results.MigrateLegacyJobs(ctx, js)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	_, err = js.Stream(ctx, results.LegacyJobsStream)
	assert.ErrorIs(t, err, jetstream.ErrStreamNotFound, "the legacy stream is gone")
	st, err := js.Stream(ctx, job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.EqualValues(t, 3, st.CachedInfo().State.Msgs)
	m, err := st.GetMsg(ctx, st.CachedInfo().State.FirstSeq)
	require.NoError(t, err)
	assert.Equal(t, "old-0", m.Header.Get(job.HeaderMsgID), "headers move with the message")
}

// A tenant's results only push out its own: a flood of alpha's results
// through its full stream leaves beta's result where it was.
func TestTenantResultsCannotEvictAnothers(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	ctx := context.Background()
	cfg := results.StreamConfig{ResultsMaxBytes: 64 << 10}
	for _, tn := range []string{"alpha", "beta"} {
		require.NoError(t, results.EnsureTenantStream(ctx, js, cfg, tn, 0))
	}
	_, err := js.Publish(ctx, job.ResultSubject("beta", "keep"), []byte(`{"id":"keep"}`))
	require.NoError(t, err)
	body := make([]byte, 4<<10)
	for i := range 64 { // 256 KiB through a 64 KiB stream
		_, err := js.Publish(ctx, job.ResultSubject("alpha", fmt.Sprint("j", i)), body)
		require.NoError(t, err)
	}
	alpha, err := js.Stream(ctx, job.ResultsStream("alpha"))
	require.NoError(t, err)
	_, err = alpha.GetLastMsgForSubject(ctx, job.ResultSubject("alpha", "j0"))
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "the control: alpha's stream dropped its own oldest results")
	beta, err := js.Stream(ctx, job.ResultsStream("beta"))
	require.NoError(t, err)
	m, err := beta.GetLastMsgForSubject(ctx, job.ResultSubject("beta", "keep"))
	require.NoError(t, err, "beta's result is still there")
	assert.Equal(t, `{"id":"keep"}`, string(m.Data))
}

// The one results stream of older versions moves into the tenants' own
// streams, headers kept, and is deleted; a second run finds nothing.
func TestMigrateLegacyResults(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: job.StreamResults, Subjects: []string{job.SubjectResultPrefix + ">"},
		MaxMsgsPerSubject: 1, AllowDirect: true})
	require.NoError(t, err)
	for _, r := range []struct{ tenant, id, body string }{{"alpha", "a1", "first"}, {"alpha", "a1", "last"}, {"beta", "b1", "b"}, {"default", "d1", "d"}} {
		msg := nats.NewMsg(job.ResultSubject(r.tenant, r.id))
		msg.Data = []byte(r.body)
		msg.Header.Set("Paddock-Test", r.id)
		_, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(job.StreamResults))
		require.NoError(t, err)
	}
	moved, err := results.MigrateLegacyResults(ctx, js, results.StreamConfig{})
	require.NoError(t, err)
	assert.Equal(t, 3, moved, "the last result of each job")
	_, err = js.Stream(ctx, job.StreamResults)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "the legacy stream is gone")
	for tenant, want := range map[string]string{"alpha": "last", "beta": "b", "default": "d"} {
		st, err := js.Stream(ctx, job.ResultsStream(tenant))
		require.NoError(t, err, tenant)
		id := map[string]string{"alpha": "a1", "beta": "b1", "default": "d1"}[tenant]
		m, err := st.GetLastMsgForSubject(ctx, job.ResultSubject(tenant, id))
		require.NoError(t, err, tenant)
		assert.Equal(t, want, string(m.Data), tenant)
		assert.Equal(t, id, m.Header.Get("Paddock-Test"), "headers move with the result")
	}
	moved, err = results.MigrateLegacyResults(ctx, js, results.StreamConfig{})
	require.NoError(t, err)
	assert.Zero(t, moved)
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}), "the streams made by the migration are the usual ones")
}
