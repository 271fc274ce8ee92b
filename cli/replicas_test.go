package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// --replicas / PADDOCK_REPLICAS other than 1, 3, 5 is refused before
// anything connects, on every command that makes streams or buckets.
func TestReplicasFlagRejectsOtherCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  string
	}{
		{"scheduler 2", []string{"scheduler", "--replicas", "2"}, ""},
		{"worker 0", []string{"worker", "--replicas", "0"}, ""},
		{"up 7", []string{"up", "--replicas", "7"}, ""},
		{"gateway -1", []string{"gateway", "--replicas", "-1"}, ""},
		{"tenant add 4", []string{"tenant", "add", "acme", "--replicas", "4"}, ""},
		{"scheduler env 2", []string{"scheduler"}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tripServices(t)
			if tc.env != "" {
				t.Setenv("PADDOCK_REPLICAS", tc.env)
			}
			args := append(append([]string(nil), tc.args...), s.flags()...)
			code, out := runCLI(t, args...)
			assert.Equal(t, exitFailure, code)
			assert.Contains(t, out, "--replicas: want 1, 3 or 5")
			assert.Zero(t, s.connections())
		})
	}
}

// A valid count passes the check (and the command goes on to connect:
// the tripwire sees it).
func TestReplicasFlagAcceptsOddCounts(t *testing.T) {
	for _, n := range []string{"1", "3", "5"} {
		s := tripServices(t)
		code, out := runCLI(t, append([]string{"scheduler", "--replicas", n}, s.flags()...)...)
		assert.Equal(t, exitFailure, code)
		assert.NotContains(t, out, "--replicas: want")
		assert.NotZero(t, s.connections())
	}
}

// A malformed Sentinel URL is refused before anything connects; its
// passwords never reach the message.
func TestBadSentinelURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis+sentinel://u:Mk1Secret@127.0.0.1:1,127.0.0.1:2", "no master name"},
		{"redis+sentinel://127.0.0.1:1/m?sentinel_password=Mk1Secret&nope=1", `unknown query parameter "nope"`},
		{"redis-sentinel://:Mk1Secret@127.0.0.1:1", "needs ?master=<name>"},
	} {
		s := tripServices(t)
		code, out := runCLI(t, append([]string{"scheduler"}, append(s.flags(), "--redis-url", tc.url)...)...)
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, out, "--redis-url")
		assert.Contains(t, out, tc.want)
		assert.NotContains(t, out, "Mk1Secret")
		assert.Zero(t, s.connections())
	}
}
