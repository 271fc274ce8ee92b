package worker_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
)

// engineOutage wraps the real Docker client. While down is set, every
// container create goes to a real client whose DOCKER_HOST is a socket
// that does not exist, and fails as an unreachable engine does.
type engineOutage struct {
	sandbox.DockerClient
	dead       *client.Client
	down       atomic.Bool
	jobCreates atomic.Int64 // creates for a job (not pool refills) that failed
}

func newEngineOutage(t *testing.T, d sandbox.DockerClient) *engineOutage {
	dead, err := client.New(client.WithHost("unix://" + filepath.Join(t.TempDir(), "no-dockerd.sock")))
	require.NoError(t, err)
	t.Cleanup(func() { dead.Close() })
	return &engineOutage{DockerClient: d, dead: dead}
}

func (e *engineOutage) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	if !e.down.Load() {
		return e.DockerClient.ContainerCreate(ctx, o)
	}
	r, err := e.dead.ContainerCreate(ctx, o)
	if err != nil && o.Config != nil && o.Config.Labels[sandbox.LabelJob] != "" {
		e.jobCreates.Add(1)
	}
	return r, err
}

// TestDockerEngineOutage: container creates fail while the engine is
// unreachable. A brief outage costs queue retries and the job then runs
// normally; an outage longer than the retries ends the job as `infra`
// (never as its own failure) and the task is archived, not retried again.
// Each job asks for its own memory limit, so its profile has no warm
// container and it must create one.
func TestDockerEngineOutage(t *testing.T) {
	var outage *engineOutage
	wrapDocker = func(d sandbox.DockerClient) sandbox.DockerClient {
		outage = newEngineOutage(t, d)
		return outage
	}
	defer func() { wrapDocker = nil }()
	s := newStack(t, nil)
	insp := asynq.NewInspectorFromRedisClient(s.rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("brief", func(t *testing.T) {
		outage.jobCreates.Store(0)
		outage.down.Store(true)
		mem := int64(48)
		sub, err := s.client.Submit(ctx, job.Spec{Command: "echo survived", Limits: job.Limits{MemoryMB: &mem}})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return outage.jobCreates.Load() >= 2 }, time.Minute, 20*time.Millisecond)
		outage.down.Store(false)
		r, err := s.client.Wait(ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, job.StateSucceeded, r.State, r.Error)
		assert.Equal(t, "survived\n", r.Stdout.Text)
		assert.GreaterOrEqual(t, r.Runs, 3, "two failed starts, then the run")
	})

	t.Run("longer than the retries", func(t *testing.T) {
		outage.jobCreates.Store(0)
		outage.down.Store(true)
		defer outage.down.Store(false)
		mem := int64(40)
		sub, err := s.client.Submit(ctx, job.Spec{Command: "echo never", Limits: job.Limits{MemoryMB: &mem}})
		require.NoError(t, err)
		r, err := s.client.Wait(ctx, sub.ID)
		require.NoError(t, err)
		assert.Equal(t, job.StateInfra, r.State)
		assert.Equal(t, job.ReasonInfra, r.Reason)
		assert.Contains(t, r.Error, "not of the job")
		assert.Contains(t, r.Error, "after 4 of 4 tries")
		assert.Nil(t, r.ExitCode, "the command never ran")
		assert.Empty(t, r.Attempts)
		assert.Equal(t, int64(4), outage.jobCreates.Load(), "1 try + 3 queue retries (scheduler MaxRetry)")
		require.Eventually(t, func() bool {
			info, err := insp.GetTaskInfo(job.DefaultQueue, job.Key("", sub.ID))
			return err == nil && info.State == asynq.TaskStateArchived
		}, 30*time.Second, 20*time.Millisecond, "the task is archived, not retried again")
	})
}
