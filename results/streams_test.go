package results_test

import (
	"context"
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
	jobs, err := js.Stream(ctx, job.StreamJobs)
	require.NoError(t, err)
	jc := jobs.CachedInfo().Config
	assert.Equal(t, []string{job.SubjectSubmit}, jc.Subjects)
	assert.Equal(t, jetstream.WorkQueuePolicy, jc.Retention)
	assert.Equal(t, jetstream.FileStorage, jc.Storage)
	assert.Equal(t, results.DefaultDedupeWindow, jc.Duplicates)
	assert.Equal(t, 1, jc.Replicas)

	res, err := js.Stream(ctx, job.StreamResults)
	require.NoError(t, err)
	rc := res.CachedInfo().Config
	assert.Equal(t, []string{job.SubjectResultPrefix + ">"}, rc.Subjects)
	assert.Equal(t, int64(1), rc.MaxMsgsPerSubject)
	assert.Equal(t, results.DefaultRetention, rc.MaxAge)
	assert.True(t, rc.AllowDirect)
	assert.Equal(t, jetstream.FileStorage, rc.Storage)
}

func TestEnsureStreamsUpdates(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	ctx := context.Background()
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}), "idempotent")
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{ResultRetention: time.Hour, DedupeWindow: time.Minute}))
	res, err := js.Stream(ctx, job.StreamResults)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, res.CachedInfo().Config.MaxAge)
	jobs, err := js.Stream(ctx, job.StreamJobs)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, jobs.CachedInfo().Config.Duplicates)
}

func TestEnsureStreamsIncompatibleExisting(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: job.StreamJobs, Subjects: []string{job.SubjectSubmit}, Retention: jetstream.InterestPolicy})
	require.NoError(t, err)
	err = results.EnsureStreams(ctx, js, results.StreamConfig{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), job.StreamJobs)
}

func TestEnsureStreamsInvalidConfig(t *testing.T) {
	t.Parallel()
	n := testsvc.StartNATS(t)
	js := connect(t, n)
	err := results.EnsureStreams(context.Background(), js, results.StreamConfig{Replicas: -1})
	require.ErrorIs(t, err, results.ErrConfig)
}
