package faulttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/job"
)

// TestStrictPriority: with --strict-priority a worker takes nothing from a
// lower queue while a higher one (--queues order) has jobs waiting.
func TestStrictPriority(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	// --slots 0: every job goes into the queues before the worker starts.
	// (With slots, jobs are admitted in each tenant's submission order and
	// the queues' priority orders only the admitted ones: docs/scheduling.md.)
	f.scheduler("sched", "--slots", "0")
	var specs []job.Spec
	for i := range 4 {
		specs = append(specs,
			job.Spec{ID: fmt.Sprintf("low-%d", i), Command: "true", Queue: "low"},
			job.Spec{ID: fmt.Sprintf("crit-%d", i), Command: "true", Queue: "critical"})
	}
	ids := f.submitAll(specs, time.Minute)
	f.waitFor(30*time.Second, "every job enqueued", func() bool {
		for _, s := range specs {
			if _, err := f.insp.GetTaskInfo(s.Queue, job.Key("", s.ID)); err != nil {
				return false
			}
		}
		return true
	})
	f.worker("w1", "--strict-priority", "--concurrency", "1")
	var lastCrit, firstLow time.Time
	for _, id := range ids {
		r := f.result(id, 2*time.Minute)
		assert.Equal(t, job.StateSucceeded, r.State)
		if r.Queue == "critical" && r.StartedAt.After(lastCrit) {
			lastCrit = r.StartedAt
		}
		if r.Queue == "low" && (firstLow.IsZero() || r.StartedAt.Before(firstLow)) {
			firstLow = r.StartedAt
		}
	}
	assert.True(t, lastCrit.Before(firstLow), "a low job started at %s, before the last critical one at %s", firstLow, lastCrit)
}
