package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

// ids returns the ids of a page's summaries, in order.
func ids(jobs []job.Summary) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// Jobs waiting for a fair-share slot (in the tenant's stream, beyond its
// max-running) are listed queued, newest first, before the indexed ones;
// filters apply to them; paging reaches every job exactly once; changes
// include them; and once one is enqueued it is listed once, from the
// index.
func TestListerShowsJobsWaitingForASlot(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	sch, err := scheduler.New(s.js, s.enq, s.store, tenantsConfig(scheduler.Quota{Tenant: "a", MaxRunning: 1}))
	require.NoError(t, err)
	require.NoError(t, sch.Start(context.Background()))
	t.Cleanup(sch.Stop)
	startLister(t, s)

	before := time.Now().Add(-time.Second)
	for i := range 5 {
		id := fmt.Sprint("w", i)
		s.publishAs("a", fmt.Appendf(nil, `{"id":%q,"command":"echo %d","labels":{"n":%q}}`, id, i, fmt.Sprint(i%2)), id)
	}
	s.taskOf("a", "w0")
	s.withheld("a", 1, 4) // w1..w4 wait in the stream: no index entry

	reply := listRequest(t, s, "a", job.ListRequest{})
	require.Empty(t, reply.Error)
	assert.Equal(t, []string{"w4", "w3", "w2", "w1", "w0"}, ids(reply.Jobs), "waiting newest first, then the index")
	for _, j := range reply.Jobs {
		assert.Equal(t, job.StateQueued, j.State, j.ID)
		assert.Equal(t, "a", j.Tenant)
		assert.False(t, j.QueuedAt.IsZero(), j.ID)
	}
	assert.Equal(t, "echo 3", reply.Jobs[1].Command)
	assert.Equal(t, job.DefaultQueue, reply.Jobs[1].Queue)

	reply = listRequest(t, s, "a", job.ListRequest{ListQuery: job.ListQuery{Label: "n=1"}})
	assert.Equal(t, []string{"w3", "w1"}, ids(reply.Jobs), "label filter on waiting jobs")
	reply = listRequest(t, s, "a", job.ListRequest{ListQuery: job.ListQuery{State: job.StateRunning}})
	assert.Empty(t, reply.Jobs, "a waiting job is not running")
	reply = listRequest(t, s, "b", job.ListRequest{})
	assert.Empty(t, reply.Jobs, "another tenant sees none of them")

	var seen []string
	q := job.ListQuery{Limit: 2}
	for range 10 {
		page := listRequest(t, s, "a", job.ListRequest{ListQuery: q})
		require.Empty(t, page.Error)
		seen = append(seen, ids(page.Jobs)...)
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	assert.Equal(t, []string{"w4", "w3", "w2", "w1", "w0"}, seen, "pages of 2 reach every job once")

	changes := listRequest(t, s, "a", job.ListRequest{Changes: &job.ChangesQuery{Since: before}})
	assert.ElementsMatch(t, []string{"w0", "w1", "w2", "w3", "w4"}, ids(changes.Jobs), "changes include the waiting jobs")

	s.finish("a", "w0") // frees the slot: w1 is enqueued and indexed
	s.taskOf("a", "w1")
	require.Eventually(t, func() bool {
		got := ids(listRequest(t, s, "a", job.ListRequest{}).Jobs)
		return assert.ObjectsAreEqual([]string{"w4", "w3", "w2", "w1", "w0"}, got)
	}, wait, 20*time.Millisecond, "w1 listed once, from the index now")

	bad := listRequest(t, s, "a", job.ListRequest{ListQuery: job.ListQuery{Cursor: "w.x"}})
	require.Len(t, bad.Fields, 1)
	assert.Equal(t, "cursor", bad.Fields[0].Field)
	assert.Contains(t, bad.Error, results.ErrBadCursor.Error())
}
