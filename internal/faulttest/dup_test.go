package faulttest

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// TestDuplicateSubmissionsRunOnce: 100 concurrent submissions of one id,
// from 4 connections, to 2 schedulers and 2 workers. The schedulers run
// with a 1 s JetStream duplicate window and the submissions are spread
// over 6 s, so the later ones pass JetStream's de-duplication and must be
// stopped by the claim, the result check and the asynq task id: one run.
func TestDuplicateSubmissionsRunOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.scheduler("s1", "--dedupe-window", "1s")
	f.scheduler("s2", "--dedupe-window", "1s")
	// Every process applies its stream settings at start (the last one
	// wins): the workers must agree.
	f.worker("w1", "--dedupe-window", "1s")
	f.worker("w2", "--dedupe-window", "1s")
	clients := make([]*pclient.Client, 4)
	for i := range clients {
		nc, err := nats.Connect(f.nats.URL)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		clients[i], err = pclient.New(nc, pclient.Config{})
		require.NoError(t, err)
		t.Cleanup(clients[i].Close)
	}
	id := testsvc.Unique("dup")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	dups := 0
	for i := range 100 {
		wg.Go(func() {
			// sleep: spreads the submissions over 6 s, past the 1 s dedupe window (the test's design).
			time.Sleep(rand.N(6 * time.Second))
			sub, err := clients[i%len(clients)].Submit(ctx, job.Spec{ID: id, Command: "sleep 1; echo once"})
			assert.NoError(t, err)
			mu.Lock()
			if sub.Duplicate {
				dups++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	r := f.result(id, time.Minute)
	assert.Equal(t, job.StateSucceeded, r.State, r.Error)
	assert.Equal(t, "once\n", r.Stdout.Text)
	assert.Equal(t, 1, r.Runs)
	// The witness that a wrong second run had its chance: every submission
	// was handled by a scheduler (none pending or unacked on the jobs
	// stream) and the queue holds nothing that could still run.
	js, err := jetstream.New(f.nc)
	require.NoError(t, err)
	cons, err := js.Consumer(ctx, job.JobsStream(f.client.Tenant()), job.ConsumerSchedulers)
	require.NoError(t, err)
	f.waitFor(time.Minute, "every submission handled and an empty queue", func() bool {
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		q, err := f.insp.GetQueueInfo(job.DefaultQueue)
		require.NoError(t, err)
		return info.NumPending == 0 && info.NumAckPending == 0 &&
			q.Active == 0 && q.Pending == 0 && q.Retry == 0 && q.Scheduled == 0
	})
	assert.Equal(t, 1, f.runs(id), "the job ran more than once")
	t.Logf("100 submissions: %d de-duplicated by JetStream, %d by the claim/result/task id layers", dups, 99-dups)
}
