package job

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShortCommand(t *testing.T) {
	assert.Equal(t, "echo hi", ShortCommand("echo hi"))
	exact := strings.Repeat("é", MaxSummaryCommand)
	assert.Equal(t, exact, ShortCommand(exact))
	assert.Equal(t, exact, ShortCommand(exact+"x"), "cut at a rune, not a byte")
	assert.Equal(t, strings.Repeat("a", MaxSummaryCommand), ShortCommand(strings.Repeat("a", 1000)))
}

func TestListQueryCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		q      ListQuery
		fields []string
	}{
		{"empty", ListQuery{}, nil},
		{"every filter", ListQuery{State: StateRunning, Reason: ReasonOOM, Queue: "q", Label: "k=v", IDPrefix: "j", Limit: 200}, nil},
		{"terminal state", ListQuery{State: StateInfra}, nil},
		{"unknown state", ListQuery{State: "sleeping"}, []string{"state"}},
		{"unknown reason", ListQuery{Reason: "bored"}, []string{"reason"}},
		{"limit too big", ListQuery{Limit: 201}, []string{"limit"}},
		{"negative limit", ListQuery{Limit: -1}, []string{"limit"}},
		{"long label", ListQuery{Label: strings.Repeat("k", 257)}, []string{"query"}},
		{"two at once", ListQuery{State: "x", Limit: 999}, []string{"state", "limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			err := q.Check()
			if tc.fields == nil {
				require.NoError(t, err)
				if tc.q.Limit == 0 {
					assert.Equal(t, DefaultListLimit, q.Limit)
				}
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			var got []string
			for _, f := range FieldErrors(err) {
				got = append(got, f.Field)
			}
			assert.Equal(t, tc.fields, got)
		})
	}
}

func TestStates(t *testing.T) {
	for _, r := range Reasons {
		assert.True(t, r.State().Terminal(), r)
		assert.True(t, ValidState(r.State()), r)
	}
	assert.False(t, StateQueued.Terminal())
	assert.False(t, StateRunning.Terminal())
	assert.True(t, ValidState(StateQueued) && ValidState(StateRunning))
	assert.False(t, ValidState("done"))
}

func TestJobsSubject(t *testing.T) {
	tn, ok := TenantFromJobsSubject(JobsRequestSubject("dev"))
	assert.True(t, ok)
	assert.Equal(t, "dev", tn)
	for _, s := range []string{"paddock.api.jobs.", "paddock.api.jobs.a.b", "paddock.api.cancel.dev", "paddock.api.jobs.*"} {
		_, ok := TenantFromJobsSubject(s)
		assert.False(t, ok, s)
	}
}
