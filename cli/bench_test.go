package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// --noop-executor runs no command at all: a worker refuses it before it
// connects to anything unless PADDOCK_BENCH=1, and the flag is not in
// --help.
func TestNoopExecutorNeedsBenchEnv(t *testing.T) {
	for _, v := range []string{"", "0", "true"} {
		t.Run("PADDOCK_BENCH="+v, func(t *testing.T) {
			s := tripServices(t)
			t.Setenv(benchEnv, v)
			code, out := runCLI(t, append([]string{"worker", "--noop-executor"}, s.flags()...)...)
			assert.Equal(t, exitFailure, code)
			assert.Contains(t, out, "--noop-executor runs no command at all")
			assert.Contains(t, out, "set PADDOCK_BENCH=1")
			assert.Zero(t, s.connections(), "nothing was connected to")
		})
	}
	t.Run("from the environment too", func(t *testing.T) {
		s := tripServices(t)
		t.Setenv(benchEnv, "")
		t.Setenv("PADDOCK_NOOP_EXECUTOR", "true")
		code, out := runCLI(t, append([]string{"worker"}, s.flags()...)...)
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, out, "for benchmarks only")
		assert.Zero(t, s.connections())
	})
	// The control: with PADDOCK_BENCH=1 the worker goes on and connects
	// (to the tripwires, and fails there), but never to Docker.
	t.Run("PADDOCK_BENCH=1", func(t *testing.T) {
		s := tripServices(t)
		t.Setenv(benchEnv, "1")
		code, out := runCLI(t, append([]string{"worker", "--noop-executor"}, s.flags()...)...)
		assert.Equal(t, exitFailure, code, "fails on the NATS tripwire")
		assert.NotContains(t, out, "for benchmarks only")
		assert.NotZero(t, s.connections())
		assert.Zero(t, s.docker.count.Load(), "a no-op worker does not connect to Docker")
	})
	t.Run("hidden from help", func(t *testing.T) {
		t.Setenv(benchEnv, "")
		code, stdout, _ := runCLIOut(t, "worker", "--help")
		assert.Equal(t, exitOK, code)
		assert.Contains(t, stdout, "--concurrency")
		assert.NotContains(t, stdout, "noop-executor")
		assert.NotContains(t, stdout, "cpu-profile")
	})
}
