package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
)

// listRequest sends req on tenant's list subject and decodes the reply.
func listRequest(t *testing.T, s *setup, tenant string, req any) job.ListReply {
	t.Helper()
	data, err := json.Marshal(req)
	require.NoError(t, err)
	msg, err := s.nc.Request(job.JobsRequestSubject(tenant), data, 10*time.Second)
	require.NoError(t, err)
	var reply job.ListReply
	require.NoError(t, json.Unmarshal(msg.Data, &reply))
	return reply
}

func startLister(t *testing.T, s *setup) *scheduler.Lister {
	t.Helper()
	l, err := scheduler.NewLister(s.nc, s.store, scheduler.ListerConfig{Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(l.Stop)
	return l
}

// A job the scheduler enqueues is listed queued, through the list service,
// for its tenant only: the tenant comes from the subject, never the body.
func TestListerListsQueuedJobs(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	cfg := testConfig()
	cfg.Tenants = scheduler.StaticTenants{{Tenant: job.DefaultTenant}, {Tenant: "other"}}
	// The store itself, not the test's counting wrapper: the scheduler
	// finds its Indexer there.
	sch, err := scheduler.New(s.js, s.enq, s.store, cfg)
	require.NoError(t, err)
	require.NoError(t, sch.Start(context.Background()))
	t.Cleanup(sch.Stop)
	startLister(t, s)

	id := s.submit(job.Spec{ID: "listed", Command: "echo hi", Labels: map[string]string{"team": "a"}})
	s.publishAs("other", []byte(`{"id":"theirs","command":"echo secret"}`), "")
	s.task("default", id)

	var reply job.ListReply
	require.Eventually(t, func() bool {
		reply = listRequest(t, s, job.DefaultTenant, job.ListRequest{})
		return len(reply.Jobs) == 1
	}, wait, 20*time.Millisecond, "the enqueued job is listed")
	assert.Empty(t, reply.Error)
	sum := reply.Jobs[0]
	assert.Equal(t, "listed", sum.ID)
	assert.Equal(t, job.StateQueued, sum.State)
	assert.Equal(t, "echo hi", sum.Command)
	assert.Equal(t, "default", sum.Queue)
	assert.False(t, sum.QueuedAt.IsZero())

	// Asking for another tenant in the body changes nothing.
	reply = listRequest(t, s, job.DefaultTenant, job.ListRequest{ListQuery: job.ListQuery{Tenant: "other"}})
	require.Len(t, reply.Jobs, 1)
	assert.Equal(t, "listed", reply.Jobs[0].ID)
	require.Eventually(t, func() bool {
		reply = listRequest(t, s, "other", job.ListRequest{})
		return len(reply.Jobs) == 1
	}, wait, 20*time.Millisecond)
	assert.Equal(t, "theirs", reply.Jobs[0].ID)

	reply = listRequest(t, s, job.DefaultTenant, job.ListRequest{Changes: &job.ChangesQuery{}})
	require.Len(t, reply.Jobs, 1, "changes")
	assert.Equal(t, "listed", reply.Jobs[0].ID)
	reply = listRequest(t, s, job.DefaultTenant, job.ListRequest{Changes: &job.ChangesQuery{Since: time.Now().Add(time.Hour)}})
	assert.Empty(t, reply.Jobs)
}

// An invalid request is answered with the fields to fix.
func TestListerInvalidRequest(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	startLister(t, s)
	reply := listRequest(t, s, job.DefaultTenant, job.ListRequest{ListQuery: job.ListQuery{State: "sleeping", Limit: 999}})
	assert.NotEmpty(t, reply.Error)
	assert.Len(t, reply.Fields, 2)
	reply = listRequest(t, s, job.DefaultTenant, job.ListRequest{ListQuery: job.ListQuery{Cursor: "bogus"}})
	require.Len(t, reply.Fields, 1)
	assert.Equal(t, "cursor", reply.Fields[0].Field)
	msg, err := s.nc.Request(job.JobsRequestSubject(job.DefaultTenant), []byte("{"), 10*time.Second)
	require.NoError(t, err)
	assert.Contains(t, string(msg.Data), "malformed list request")
}

func TestListerStartStopRepeatedly(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	l, err := scheduler.NewLister(s.nc, s.store, scheduler.ListerConfig{Logger: quiet()})
	require.NoError(t, err)
	ctx := context.Background()
	for range 3 {
		require.NoError(t, l.Start(ctx))
		require.NoError(t, l.Start(ctx))
		reply := listRequest(t, s, job.DefaultTenant, job.ListRequest{})
		assert.Empty(t, reply.Error)
		l.Stop()
		l.Stop()
		_, err := s.nc.Request(job.JobsRequestSubject(job.DefaultTenant), []byte("{}"), time.Second)
		assert.Error(t, err, "stopped: no responder")
	}
	_, err = scheduler.NewLister(nil, s.store, scheduler.ListerConfig{})
	assert.ErrorIs(t, err, scheduler.ErrConfig)
}
