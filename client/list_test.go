package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

// listFleet is an ioFleet (the real tenant grant) with a results store on
// a real redis-server and the schedulers' list service answering.
func listFleet(t *testing.T, tenants ...string) (*ioFleet, *results.Store) {
	t.Helper()
	f := startIOFleet(t, results.StoreQuota{}, tenants...)
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	st := results.NewStore(rdb, f.js, results.StoreConfig{})
	l, err := scheduler.NewLister(f.js.Conn(), st, scheduler.ListerConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(l.Stop)
	return f, st
}

// A tenant lists and follows its own jobs with exactly its credentials; it
// never sees another tenant's, and cannot ask as another tenant.
func TestListOwnJobsOnly(t *testing.T) {
	t.Parallel()
	f, st := listFleet(t, "ta", "tb")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i, id := range []string{"a1", "a2", "a3"} {
		require.NoError(t, st.Queued(ctx, job.Spec{ID: id, Tenant: "ta", Command: "echo " + id, Queue: "default"},
			time.Now().Add(time.Duration(i)*time.Millisecond)))
	}
	require.NoError(t, st.Queued(ctx, job.Spec{ID: "b-secret", Tenant: "tb", Command: "echo secret"}, time.Now()))

	ta, errs := f.client("ta", "ta")
	page, err := ta.List(ctx, job.ListQuery{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	assert.Equal(t, []string{"a3", "a2"}, []string{page.Jobs[0].ID, page.Jobs[1].ID})
	require.NotEmpty(t, page.NextCursor)
	page, err = ta.List(ctx, job.ListQuery{Limit: 2, Cursor: page.NextCursor})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	assert.Equal(t, "a1", page.Jobs[0].ID)
	assert.Empty(t, page.NextCursor)

	// Naming another tenant in the query changes nothing.
	page, err = ta.List(ctx, job.ListQuery{Tenant: "tb", IDPrefix: "b-"})
	require.NoError(t, err)
	assert.Empty(t, page.Jobs)

	ch, err := ta.Changes(ctx, time.Time{}, 0)
	require.NoError(t, err)
	assert.Len(t, ch, 3)
	for _, s := range ch {
		assert.Equal(t, "ta", s.Tenant)
	}
	assert.Empty(t, errs.list(), "the tenant's grant allows listing")

	intruder, _ := f.client("ta", "tb")
	refused(t, "List", func() error { _, err := intruder.List(ctx, job.ListQuery{}); return err })
	refused(t, "Changes", func() error { _, err := intruder.Changes(ctx, time.Time{}, 0); return err })
}

func TestListInvalidQuery(t *testing.T) {
	t.Parallel()
	f, _ := listFleet(t, "ta")
	ta, _ := f.client("ta", "ta")
	ctx := context.Background()
	_, err := ta.List(ctx, job.ListQuery{Reason: "bored"})
	var verr *job.ValidationError
	require.ErrorAs(t, err, &verr)
	assert.Equal(t, "reason", verr.Fields[0].Field)
	_, err = ta.List(ctx, job.ListQuery{Cursor: "bogus"})
	require.ErrorAs(t, err, &verr, "the lister's refusal comes back as fields")
	assert.Equal(t, "cursor", verr.Fields[0].Field)
}

// Without a list service the call ends at its deadline with ErrNoLister.
func TestListNoLister(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	ta, _ := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := ta.List(ctx, job.ListQuery{})
	assert.ErrorIs(t, err, client.ErrNoLister)
}

// Cancel shares List's retry loop (askService): without a scheduler it
// too ends at its deadline, with ErrNoCanceler naming the job.
func TestCancelNoCanceler(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	ta, _ := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := ta.Cancel(ctx, "j-none")
	assert.ErrorIs(t, err, client.ErrNoCanceler)
	assert.ErrorContains(t, err, "j-none")
}

// Page through the tenant's failed jobs, newest first, then follow changes.
// (Compiled, not run: it needs a fleet; c is connected as in Example.)
func ExampleClient_List() {
	var c *client.Client
	ctx := context.Background()
	q := job.ListQuery{State: job.StateFailed, Label: "pipeline=docs"}
	var last time.Time
	for {
		page, err := c.List(ctx, q)
		if err != nil {
			panic(err)
		}
		for _, s := range page.Jobs {
			fmt.Println(s.ID, s.Reason, s.FinishedAt)
			if s.UpdatedAt.After(last) {
				last = s.UpdatedAt
			}
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	changed, err := c.Changes(ctx, last, 0)
	if err != nil {
		panic(err)
	}
	for _, s := range changed {
		fmt.Println(s.ID, s.State)
	}
}
