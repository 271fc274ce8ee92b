package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SIGHUP reloads the policy; a policy that fails to load keeps the one in
// force.
func TestBrokerPolicyReloadsOnHUP(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	write := func(grant string) {
		require.NoError(t, os.WriteFile(path, []byte(`{"grants": [{"name": "`+grant+`", "url": "https://example.com"}], "tenants": {"dev": ["`+grant+`"]}}`), 0o600))
	}
	write("first")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logged := logSignal{msgs: make(chan string, 16)}
	f, err := startBroker(ctx, &brokerFlags{policy: path}, false, nil, nil, slog.New(logged))
	require.NoError(t, err)
	require.NoError(t, f.Check("dev", []string{"first"}))
	assert.Error(t, f.Check("dev", []string{"second"}))

	write("second")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return f.Check("dev", []string{"second"}) == nil }, 10*time.Second, 10*time.Millisecond)
	assert.Error(t, f.Check("dev", []string{"first"}), "the new policy replaced the old")

	require.NoError(t, os.WriteFile(path, []byte(`{"grants": [`), 0o600))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	logged.await(t, "broker reload failed; the previous policy and secrets stay in force")
	assert.NoError(t, f.Check("dev", []string{"second"}), "a broken file keeps the policy in force")

	// Flags that need a policy are refused without one.
	_, err = startBroker(ctx, &brokerFlags{secretsDir: dir}, true, nil, nil, slog.New(slog.DiscardHandler))
	assert.ErrorContains(t, err, "need --broker-policy")
}

// logSignal is a slog.Handler that sends each record's message on msgs
// (dropped when msgs is full): a test waits for what the code logs.
type logSignal struct{ msgs chan string }

func (h logSignal) Enabled(context.Context, slog.Level) bool { return true }

func (h logSignal) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.msgs <- r.Message:
	default:
	}
	return nil
}

func (h logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logSignal) WithGroup(string) slog.Handler      { return h }

// await waits until msg is logged.
func (h logSignal) await(t *testing.T, msg string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-h.msgs:
			if m == msg {
				return
			}
		case <-timeout:
			t.Fatalf("not logged within 10s: %q", msg)
		}
	}
}
