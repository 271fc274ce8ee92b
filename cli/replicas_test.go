package cli

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
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

// signalWriter closes seen the first time what it is written holds want.
type signalWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) && w.seen != nil {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

// A service started while its NATS cluster has no quorum waits for it
// (retrying, saying so) and makes its streams at R3 once the cluster is
// back, instead of exiting on the first timeout.
func TestFleetStreamsWaitForTheCluster(t *testing.T) {
	c := testsvc.StartNATSCluster(t, 3)
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	c.Shutdown(1)
	c.Shutdown(2) // one of three: no meta leader, no R3 placement

	w := &signalWriter{want: "JetStream did not answer", seen: make(chan struct{})}
	seen := w.seen
	log := slog.New(slog.NewTextHandler(w, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ensureFleetStreams(ctx, js, results.StreamConfig{Replicas: 3}, log) }()
	select {
	case <-seen: // the first try failed and a retry is due: the positive witness
	case err := <-done:
		t.Fatalf("ensureFleetStreams returned before the cluster was back: %v", err)
	case <-ctx.Done():
		t.Fatal("no retry logged")
	}
	c.Restart(1)
	c.Restart(2)
	require.NoError(t, <-done)
	info, err := js.Stream(ctx, job.ResultsStream(job.DefaultTenant))
	require.NoError(t, err)
	assert.Equal(t, 3, info.CachedInfo().Config.Replicas)
}

// A refusal is not waited out: a config JetStream rejects fails at once.
func TestFleetStreamsFailFastOnARefusal(t *testing.T) {
	nc, err := nats.Connect(testsvc.StartNATS(t).URL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	err = ensureFleetStreams(context.Background(), js, results.StreamConfig{Replicas: 3}, slog.New(slog.DiscardHandler))
	require.Error(t, err)
	assert.False(t, transientJS(err), "a single server's refusal of R3 is not transient: %v", err)
}
