package main

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
	f, err := startBroker(ctx, &brokerFlags{policy: path}, false, nil, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, f.Check("dev", []string{"first"}))
	assert.Error(t, f.Check("dev", []string{"second"}))

	write("second")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return f.Check("dev", []string{"second"}) == nil }, 10*time.Second, 10*time.Millisecond)
	assert.Error(t, f.Check("dev", []string{"first"}), "the new policy replaced the old")

	require.NoError(t, os.WriteFile(path, []byte(`{"grants": [`), 0o600))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	time.Sleep(200 * time.Millisecond) // nothing to wait for: the reload fails
	assert.NoError(t, f.Check("dev", []string{"second"}), "a broken file keeps the policy in force")

	// Flags that need a policy are refused without one.
	_, err = startBroker(ctx, &brokerFlags{secretsDir: dir}, true, nil, nil, slog.New(slog.DiscardHandler))
	assert.ErrorContains(t, err, "need --broker-policy")
}
