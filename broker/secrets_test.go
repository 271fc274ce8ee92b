package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
)

func TestDirSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	writeSecret(t, dir, "github-token", "ghp_0123456789\n")
	writeSecret(t, dir, "crlf.key", "value-with-crlf\r\n")
	writeSecret(t, dir, ".hidden", "x") // skipped (Kubernetes' ..data and the like)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	require.NoError(t, os.Symlink(filepath.Join(dir, "github-token"), filepath.Join(dir, "linked")))

	s, err := broker.NewDirSecrets(ctx, dir)
	require.NoError(t, err)
	for name, want := range map[string]string{"github-token": "ghp_0123456789", "crlf.key": "value-with-crlf", "linked": "ghp_0123456789"} {
		v, err := s.Secret(ctx, name)
		require.NoError(t, err, name)
		assert.Equal(t, want, v, name)
	}
	_, err = s.Secret(ctx, "missing")
	assert.ErrorIs(t, err, broker.ErrNoSecret)
	assert.ErrorContains(t, err, filepath.Join(dir, "missing")+" (mode 0600)")
	_, err = s.Secret(ctx, ".hidden")
	assert.ErrorIs(t, err, broker.ErrNoSecret)
}

func TestDirSecretsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, file, value string
		mode              os.FileMode
		msg               string
	}{
		{"group-readable", "a", "long-enough-1", 0o640, "has mode 0640, so others may read the secret in it: run `chmod 600"},
		{"other-readable", "a", "long-enough-1", 0o604, "has mode 0604"},
		{"short", "a", "short\n", 0o600, "is 5 bytes, under the minimum of 8"},
		{"bad-name", "a b", "long-enough-1", 0o600, "file name must be of [A-Za-z0-9._-]"},
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, tc.file)
		require.NoError(t, os.WriteFile(p, []byte(tc.value), 0o600))
		require.NoError(t, os.Chmod(p, tc.mode))
		_, err := broker.NewDirSecrets(ctx, dir)
		assert.ErrorIs(t, err, broker.ErrSecretSource, tc.name)
		assert.ErrorContains(t, err, tc.msg, tc.name)
	}
	_, err := broker.NewDirSecrets(ctx, filepath.Join(t.TempDir(), "none"))
	assert.ErrorIs(t, err, broker.ErrSecretSource)
}

// TestDirSecretsConcurrentReload reads secrets while they are reloaded
// (run with -race).
func TestDirSecretsConcurrentReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	writeSecret(t, dir, "k", "value-0000")
	s, err := broker.NewDirSecrets(ctx, dir)
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 50 {
			writeSecret(t, dir, "k", fmt.Sprintf("value-%04d", i))
			assert.NoError(t, s.Reload(ctx))
		}
	}()
	go func() {
		defer wg.Done()
		for range 500 {
			v, err := s.Secret(ctx, "k")
			assert.NoError(t, err)
			assert.Len(t, v, 10)
		}
	}()
	wg.Wait()
	v, err := s.Secret(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "value-0049", v)
}

// Not parallel: it sets environment variables.
func TestEnvSecrets(t *testing.T) {
	ctx := context.Background()
	t.Setenv("PBTEST_SECRET_GITHUB_TOKEN", "ghp_from_env_1")
	t.Setenv("PBTEST_SECRET_CRM_KEY_V2", "crm-key-value")
	t.Setenv("PBTEST_OTHER", "not-a-secret-value")
	s, err := broker.NewEnvSecrets(ctx, "PBTEST_SECRET_")
	require.NoError(t, err)
	v, err := s.Secret(ctx, "github-token")
	require.NoError(t, err)
	assert.Equal(t, "ghp_from_env_1", v)
	v, err = s.Secret(ctx, "crm-key.v2")
	require.NoError(t, err)
	assert.Equal(t, "crm-key-value", v)
	assert.Equal(t, "PBTEST_SECRET_CRM_KEY_V2", broker.EnvName("PBTEST_SECRET_", "crm-key.v2"))

	_, err = s.Secret(ctx, "other")
	assert.ErrorIs(t, err, broker.ErrNoSecret)
	assert.ErrorContains(t, err, "set $PBTEST_SECRET_OTHER")

	t.Setenv("PBTEST_SECRET_GITHUB_TOKEN", "ghp_from_env_2")
	require.NoError(t, s.Reload(ctx))
	v, _ = s.Secret(ctx, "github-token")
	assert.Equal(t, "ghp_from_env_2", v)

	t.Setenv("PBTEST_SECRET_WEAK", "short")
	assert.ErrorIs(t, s.Reload(ctx), broker.ErrSecretSource)
	v, _ = s.Secret(ctx, "github-token")
	assert.Equal(t, "ghp_from_env_2", v, "a failed reload keeps the secrets")

	_, err = broker.NewEnvSecrets(ctx, "")
	assert.ErrorIs(t, err, broker.ErrSecretSource)
}
