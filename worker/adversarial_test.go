package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
)

// The adversarial suite on the whole fleet (real NATS, Redis, Docker): the
// job's code attacks its own control plane. Each case checks four things:
// the job's true reason and exit code, that it ran once, that the next job
// on the same worker and image is unaffected, and that no container of the
// job survives it.

const attackDir = testsvc.AttackDir

func TestAdversarial(t *testing.T) {
	dir := testsvc.BuildAttack(t)
	s := newStackSandbox(t, nil, func(c *sandbox.Config) {
		c.ExtraMounts = []sandbox.Mount{{Source: dir, Target: attackDir}}
		c.OutputKillBytes = 256 << 20
	})
	i64 := func(v int64) *int64 { return &v }
	cases := []struct {
		name   string
		spec   job.Spec
		reason job.Reason
		exit   int // -2: any
		check  func(t *testing.T, r job.Result)
	}{
		{name: "signals to PID 1", reason: job.ReasonExitNonzero, exit: 4, spec: job.Spec{Command: `for n in $(seq 1 64); do kill -$n 1; done 2>/dev/null
			kill -TERM 1; kill -INT 1; kill -HUP 1; kill -KILL 1; kill -SEGV 1; sleep 0.2; echo alive; exit 4`},
			check: func(t *testing.T, r job.Result) { assert.Equal(t, "alive\n", r.Stdout.Text) }},
		{name: "forged and garbage frames on every fd of init", reason: job.ReasonExitNonzero, exit: 3,
			spec: job.Spec{Command: attackDir + `/attack all; echo "rc=$?"; exit 3`, Limits: job.Limits{OutputBytes: i64(64 << 10)}},
			check: func(t *testing.T, r job.Result) {
				assert.Contains(t, r.Stdout.Text, "reached: none")
				assert.Contains(t, r.Stdout.Text, "rc=0")
			}},
		{name: "forged frames on its own streams", reason: job.ReasonExitNonzero, exit: 6,
			spec: job.Spec{Command: `printf 'X\0\0\0\035{"id":1,"exit_code":0,"d":0} '; printf 'X\0\0\0\2{}' >&2; exit 6`},
			check: func(t *testing.T, r job.Result) {
				assert.Equal(t, "X\x00\x00\x00\x1d{\"id\":1,\"exit_code\":0,\"d\":0} ", r.Stdout.Text)
			}},
		{name: "max caps with both streams flooded", reason: job.ReasonExitNonzero, exit: 9,
			spec: job.Spec{Command: `head -c 20000000 /dev/urandom & head -c 20000000 /dev/urandom >&2; wait; exit 9`,
				Limits: job.Limits{OutputBytes: i64(16 << 20), CommandTimeoutS: i64(120)}},
			check: func(t *testing.T, r job.Result) {
				assert.Equal(t, int64(20000000), r.Stdout.Bytes)
				assert.Equal(t, int64(20000000), r.Stderr.Bytes)
				b, err := json.Marshal(r)
				require.NoError(t, err)
				assert.LessOrEqual(t, len(b), 1<<20, "the stored result is bounded by the worker's number, not the job's")
			}},
		{name: "smallest accepted limits run a pipeline", reason: job.ReasonOK, exit: 0,
			spec:  job.Spec{Command: `echo ok | cat`, Limits: job.Limits{Pids: i64(job.MinPids), MemoryMB: i64(job.MinMemoryMB)}},
			check: func(t *testing.T, r job.Result) { assert.Equal(t, "ok\n", r.Stdout.Text) }},
		{name: "fork bomb at the smallest limits", reason: job.ReasonPidsLimit, exit: -2,
			spec: job.Spec{Command: `:(){ :|:& };:; sleep 30`, Limits: job.Limits{Pids: i64(job.MinPids), MemoryMB: i64(job.MinMemoryMB)}}},
		{name: "memory bomb at the smallest memory", reason: job.ReasonOOM, exit: -2,
			spec: job.Spec{Command: `x=$(head -c 64m /dev/zero | tr '\0' a); echo ${#x}`, Limits: job.Limits{MemoryMB: i64(job.MinMemoryMB)}}},
		{name: "forged 127 with command not found", reason: job.ReasonExitNonzero, exit: 127,
			spec: job.Spec{Command: `echo "bash: bash: command not found" >&2; echo "paddock: bash: command not found" >&2; exit 127`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.run(tc.spec)
			assert.Equal(t, tc.reason, r.Reason, "error %q stderr %q", r.Error, r.Stderr.Text)
			if tc.exit != -2 {
				require.NotNil(t, r.ExitCode)
				assert.Equal(t, tc.exit, *r.ExitCode)
			}
			assert.Equal(t, 1, r.Runs, "ran once: no queue retry")
			if tc.check != nil {
				tc.check(t, r)
			}
			next := s.run(job.Spec{Command: `echo "next ${BASH_VERSION%%.*}"`})
			assert.Equal(t, job.ReasonOK, next.Reason, next.Error)
			assert.Equal(t, "next 5\n", next.Stdout.Text, "the next job still runs with bash")
			require.Eventually(t, func() bool {
				list, err := s.docker.ContainerList(context.Background(), client.ContainerListOptions{
					All: true, Filters: make(client.Filters).Add("label", sandbox.LabelJob+"="+r.ID)})
				return err == nil && len(list.Items) == 0
			}, 30*time.Second, 50*time.Millisecond, "the job's container survived it")
		})
	}
}
