package job

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReasonState(t *testing.T) {
	t.Parallel()
	want := map[Reason]State{
		ReasonOK:          StateSucceeded,
		ReasonExitNonzero: StateFailed,
		ReasonTimeout:     StateFailed,
		ReasonOOM:         StateFailed,
		ReasonPidsLimit:   StateFailed,
		ReasonOutputCap:   StateFailed,
		ReasonFsize:       StateFailed,
		ReasonSignal:      StateFailed,
		ReasonLeaseLost:   StateFailed,
		ReasonCanceled:    StateCanceled,
		ReasonRejected:    StateRejected,
		ReasonInfra:       StateInfra,
	}
	require.Len(t, Reasons, len(want), "Reasons lists every reason once")
	for _, r := range Reasons {
		assert.True(t, r.Valid(), r)
		assert.Equal(t, want[r], r.State(), r)
	}
	assert.False(t, Reason("").Valid())
	assert.False(t, Reason("OK").Valid())
	assert.Equal(t, StateFailed, Reason("new").State(), "an unknown reason is a failure")
	assert.Equal(t, []Reason{"ok", "exit_nonzero", "timeout", "oom", "pids_limit", "output_cap", "fsize",
		"signal", "lease_lost", "canceled", "rejected", "infra"}, Reasons, "wire values in docs/job-contract.md order")
}

func TestResultFinish(t *testing.T) {
	t.Parallel()
	for _, r := range Reasons {
		var res Result
		res.Finish(r)
		assert.Equal(t, Version, res.V)
		assert.Equal(t, r, res.Reason)
		assert.Equal(t, r.State(), res.State)
	}
}

func TestOutputString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		out  Output
		want string
	}{
		{"empty", Output{}, ""},
		{"whole", Output{Text: "hello\n", Bytes: 6}, "hello\n"},
		{"whole ignores tail", Output{Text: "a", Tail: "b", Bytes: 2}, "a"},
		{"truncated", Output{Text: "head", Tail: "tail", Bytes: 1000, Truncated: true, OmittedBytes: 992}, "head\n…[992 bytes omitted]…\ntail"},
		{"truncated zero", Output{Text: "h", Tail: "t", Truncated: true}, "h\n…[0 bytes omitted]…\nt"},
		{"big", Output{Text: "h", Truncated: true, OmittedBytes: math.MaxInt64}, "h\n…[9223372036854775807 bytes omitted]…\n"},
		{"min int64", Output{Text: "h", Truncated: true, OmittedBytes: math.MinInt64}, "h\n…[-9223372036854775808 bytes omitted]…\n"},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, tc.out.String(), tc.name)
	}
}

func TestResultJSONRoundTrip(t *testing.T) {
	t.Parallel()
	for _, r := range []Result{fullResult(), rejectedResult()} {
		r.Finish(r.Reason)
		b, err := json.Marshal(r)
		require.NoError(t, err)
		var got Result
		require.NoError(t, json.Unmarshal(b, &got))
		assert.Equal(t, r, got)
	}
}

func TestResultJSONShape(t *testing.T) {
	t.Parallel()
	r := fullResult()
	r.Finish(ReasonExitNonzero)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, "failed", m["state"])
	assert.Equal(t, "exit_nonzero", m["reason"])
	assert.Equal(t, map[string]any{"memory_mb": 512.0, "cpus": 0.5, "pids": 64.0, "command_timeout_s": 30.0,
		"job_timeout_s": 300.0, "output_bytes": float64(1 << 20), "tmpfs_mb": 64.0, "keep_output": true}, m["limits"], "timeouts in seconds")
	assert.Equal(t, map[string]any{"name": "", "bytes": 5.0, "sha256": "", "note": "not kept: the tenant's output bucket is full"},
		m["kept"].(map[string]any)["stderr"], "an object not kept has an empty name and a note")
	assert.Contains(t, string(b), `"command_timeout_s":30,`, "whole seconds print as integers")

	// A minimal result keeps its required members and drops the rest.
	var min Result
	min.ID = "x"
	min.Finish(ReasonInfra)
	b, err = json.Marshal(min)
	require.NoError(t, err)
	assert.JSONEq(t, `{"v":1,"id":"x","state":"infra","reason":"infra","stdout":{"text":"","bytes":0},"stderr":{"text":"","bytes":0}}`, string(b))
}

func TestEffectiveJSON(t *testing.T) {
	t.Parallel()
	e := Effective{MemoryMB: 1, CPUs: 0.25, Pids: 2, CommandTimeout: 1500 * time.Millisecond, JobTimeout: time.Hour, OutputBytes: 3, TmpfsMB: 4}
	b, err := json.Marshal(e)
	require.NoError(t, err)
	assert.JSONEq(t, `{"memory_mb":1,"cpus":0.25,"pids":2,"command_timeout_s":1.5,"job_timeout_s":3600,"output_bytes":3,"tmpfs_mb":4}`, string(b))
	var got Effective
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, e, got)

	require.NoError(t, json.Unmarshal([]byte(`{"command_timeout_s":1e300,"job_timeout_s":-1e300}`), &got))
	assert.Equal(t, time.Duration(math.MaxInt64), got.CommandTimeout, "saturates")
	assert.Equal(t, time.Duration(math.MinInt64), got.JobTimeout, "saturates")
	assert.Error(t, json.Unmarshal([]byte(`{"memory_mb":"x"}`), &got))

	// keep_output is written only when true.
	e.KeepOutput = true
	b, err = json.Marshal(e)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"keep_output":true`)
	got = Effective{}
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, e, got)
	e.KeepOutput = false

	// Through a pointer, as in Result.Limits.
	b, err = json.Marshal(struct{ L *Effective }{&e})
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(b), `"job_timeout_s":3600`), string(b))
}
