package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/hibiken/asynq"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

// withCanceler adds the scheduler-side cancel responder to s.
func withCanceler(t *testing.T, s *stack) *asynq.Inspector {
	t.Helper()
	insp := asynq.NewInspectorFromRedisClient(s.rdb)
	c, err := scheduler.NewCanceler(s.nc, insp, s.store, scheduler.CancelerConfig{})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	require.NoError(t, c.Start(context.Background())) // idempotent
	t.Cleanup(func() { c.Stop(); c.Stop() })
	return insp
}

// waitTaskState polls until the job's task is in state.
func waitTaskState(t *testing.T, insp *asynq.Inspector, id string, state asynq.TaskState) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := insp.GetTaskInfo(job.DefaultQueue, job.Key("", id))
		return err == nil && info.State == state
	}, time.Minute, 20*time.Millisecond, "task %s never %s", id, state)
}

// containerRunning returns the id of the owner's container whose processes
// mention marker, polling until one does.
func containerRunning(t *testing.T, d *client.Client, owner, marker string) string {
	t.Helper()
	var found string
	require.Eventually(t, func() bool {
		list, err := d.ContainerList(context.Background(), client.ContainerListOptions{
			Filters: make(client.Filters).Add("label", sandbox.LabelOwner+"="+owner)})
		if err != nil {
			return false
		}
		for _, c := range list.Items {
			top, err := d.ContainerTop(context.Background(), c.ID, client.ContainerTopOptions{})
			if err != nil {
				continue
			}
			for _, p := range top.Processes {
				if strings.Contains(strings.Join(p, " "), marker) {
					found = c.ID
					return true
				}
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "no container of %s runs %q", owner, marker)
	return found
}

func TestCancel(t *testing.T) {
	s := newStack(t, func(c *worker.Config) { c.Concurrency = 1 })
	insp := withCanceler(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A running job: its container is killed and the result is canceled.
	running := testsvc.Unique("run")
	_, err := s.client.Submit(ctx, job.Spec{ID: running, Command: "sleep 120; : " + running})
	require.NoError(t, err)
	cid := containerRunning(t, s.docker, s.owner, running)

	// A job queued behind it (concurrency 1) is removed from the queue.
	queued := testsvc.Unique("q")
	_, err = s.client.Submit(ctx, job.Spec{ID: queued, Command: "echo never"})
	require.NoError(t, err)
	waitTaskState(t, insp, queued, asynq.TaskStatePending)

	t.Run("queued", func(t *testing.T) {
		r, err := s.client.Cancel(ctx, queued)
		require.NoError(t, err)
		assert.Equal(t, job.CancelQueued, r.Outcome, r.Message)
		res, err := s.client.Wait(ctx, queued)
		require.NoError(t, err)
		assert.Equal(t, job.StateCanceled, res.State)
		assert.Equal(t, job.ReasonCanceled, res.Reason)
		assert.Zero(t, res.Runs, "a job canceled in the queue never runs")
		_, err = insp.GetTaskInfo(job.DefaultQueue, job.Key("", queued))
		assert.ErrorIs(t, err, asynq.ErrTaskNotFound)
	})

	t.Run("running", func(t *testing.T) {
		t0 := time.Now()
		r, err := s.client.Cancel(ctx, running)
		require.NoError(t, err)
		assert.Equal(t, job.CancelKilling, r.Outcome, r.Message)
		res, err := s.client.Wait(ctx, running)
		require.NoError(t, err)
		assert.Equal(t, job.StateCanceled, res.State)
		assert.Equal(t, job.ReasonCanceled, res.Reason)
		assert.Equal(t, 1, res.Runs)
		require.Len(t, res.Attempts, 1)
		assert.Equal(t, job.ReasonCanceled, res.Attempts[0].Reason)
		t.Logf("cancel → canceled result in %s", time.Since(t0).Round(time.Millisecond))
		// The worker confirms the container is gone before recording.
		_, err = s.docker.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
		assert.True(t, cerrdefs.IsNotFound(err), "container %s still exists: %v", cid, err)
		// Never run again. asynq hands a task whose context it canceled
		// back for a retry (here some 20 s later); that retry must find the
		// result and complete without a run. Once asynq holds the task
		// completed, nothing runs it again: the witness that it had its
		// chance.
		waitTaskState(t, insp, running, asynq.TaskStateCompleted)
		again, err := s.store.Get(ctx, job.Key("", running))
		require.NoError(t, err)
		assert.Equal(t, 1, again.Runs)
	})

	t.Run("finished", func(t *testing.T) {
		done := s.run(job.Spec{Command: "echo done"})
		r, err := s.client.Cancel(ctx, done.ID)
		require.NoError(t, err)
		assert.Equal(t, job.CancelFinished, r.Outcome)
		assert.Equal(t, job.StateSucceeded, r.State)
		again, err := s.store.Get(ctx, job.Key("", done.ID))
		require.NoError(t, err)
		assert.Equal(t, job.StateSucceeded, again.State, "a finished job's result is never changed")
	})

	t.Run("before submission", func(t *testing.T) {
		id := testsvc.Unique("early")
		r, err := s.client.Cancel(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, job.CancelFlagged, r.Outcome)
		_, err = s.client.Submit(ctx, job.Spec{ID: id, Command: "echo never"})
		require.NoError(t, err)
		res, err := s.client.Wait(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, job.StateCanceled, res.State)
		assert.Zero(t, res.Runs)
	})

	t.Run("invalid id", func(t *testing.T) {
		_, err := s.client.Cancel(ctx, "bad id")
		assert.ErrorIs(t, err, job.ErrInvalid)
	})
}

// TestCancelFlagPollWithoutNotification: a worker stops a running job when
// only the cancel flag is set (the asynq notification was lost).
func TestCancelFlagPollWithoutNotification(t *testing.T) {
	s := newStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := testsvc.Unique("poll")
	_, err := s.client.Submit(ctx, job.Spec{ID: id, Command: "sleep 120; : " + id})
	require.NoError(t, err)
	containerRunning(t, s.docker, s.owner, id)
	require.NoError(t, s.store.Cancel(ctx, job.Key("", id)))
	res, err := s.client.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, job.ReasonCanceled, res.Reason)
	assert.Equal(t, "canceled while running; its container was killed", res.Error)
}

// slowRemove delays every container removal, as a loaded engine does.
type slowRemove struct {
	sandbox.DockerClient
	delay time.Duration
}

func (s slowRemove) ContainerRemove(ctx context.Context, id string, o client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	// sleep: the injected fault is the latency itself (an engine that does not heed ctx).
	time.Sleep(s.delay)
	return s.DockerClient.ContainerRemove(ctx, id, o)
}

// A canceled running job whose container takes seconds to remove still
// ends with the run that happened (runs 1, its attempt): asynq retries a
// task whose context it canceled without waiting for the handler, and a
// retry that came before the record used to write "canceled before it
// started" with runs 0.
func TestCancelWhileRemovalIsSlow(t *testing.T) {
	wrapDocker = func(d sandbox.DockerClient) sandbox.DockerClient { return slowRemove{d, 4 * time.Second} }
	defer func() { wrapDocker = nil }()
	s := newStack(t, func(c *worker.Config) { c.Concurrency = 2 })
	withCanceler(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	id := testsvc.Unique("slowrm")
	_, err := s.client.Submit(ctx, job.Spec{ID: id, Command: "sleep 120; : " + id})
	require.NoError(t, err)
	containerRunning(t, s.docker, s.owner, id)
	r, err := s.client.Cancel(ctx, id)
	require.NoError(t, err)
	require.Equal(t, job.CancelKilling, r.Outcome, r.Message)
	res, err := s.client.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, job.ReasonCanceled, res.Reason)
	assert.Equal(t, 1, res.Runs, res.Error)
	assert.Len(t, res.Attempts, 1)
}
