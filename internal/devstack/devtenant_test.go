package devstack_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/devstack"
	"github.com/paddockhq/paddock/tenant"
)

// adminRegistry is the tenant registry of a's server, as its admin user.
func adminRegistry(t *testing.T, a *devstack.Auth, url string) *tenant.Registry {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserCredentials(a.AdminCreds))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	reg, err := tenant.NewRegistry(context.Background(), js)
	require.NoError(t, err)
	return reg
}

// A new stack registers dev with its user and account; a record that
// holds them is left alone, and a dev removed (its user revoked) stays
// removed.
func TestEnsureDevTenant(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	a, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	_, url := startAuthNATS(t, a, filepath.Join(data, "nats"))
	reg := adminRegistry(t, a, url)
	ctx, log := context.Background(), slog.New(slog.DiscardHandler)

	require.NoError(t, a.EnsureDevTenant(ctx, reg, log))
	dev, err := reg.Get(ctx, devstack.DevTenant)
	require.NoError(t, err)
	account, err := a.Authority.TenantAccountKey(devstack.DevTenant)
	require.NoError(t, err)
	assert.Equal(t, account, dev.Account)
	assert.Equal(t, a.DevUser, dev.User)
	dev.MaxQueued = 7
	require.NoError(t, reg.Put(ctx, dev))
	require.NoError(t, a.EnsureDevTenant(ctx, reg, log))
	again, err := reg.Get(ctx, devstack.DevTenant)
	require.NoError(t, err)
	assert.Equal(t, int64(7), again.MaxQueued, "a record that holds dev's user is left alone")

	require.NoError(t, reg.Delete(ctx, devstack.DevTenant))
	require.NoError(t, a.Authority.RevokeTenant(devstack.DevTenant))
	require.NoError(t, a.EnsureDevTenant(ctx, reg, log))
	_, err = reg.Get(ctx, devstack.DevTenant)
	require.ErrorIs(t, err, tenant.ErrNotFound, "a removed dev stays removed")
}

// When LoadOrCreateAuth moved dev into its own account, its record gets
// the new user and account, its quotas kept; without DevMoved a record of
// another user is not touched.
func TestEnsureDevTenantRecordsAMove(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	a, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	_, url := startAuthNATS(t, a, filepath.Join(data, "nats"))
	reg := adminRegistry(t, a, url)
	ctx, log := context.Background(), slog.New(slog.DiscardHandler)
	old := tenant.Tenant{Name: devstack.DevTenant, User: userOf(t, a.SchedulerCreds).Key, MaxQueued: 3}
	require.NoError(t, reg.Create(ctx, old))

	require.NoError(t, a.EnsureDevTenant(ctx, reg, log))
	kept, err := reg.Get(ctx, devstack.DevTenant)
	require.NoError(t, err)
	assert.Equal(t, old.User, kept.User, "not moved: the record is the operator's")

	a.DevMoved = true
	require.NoError(t, a.EnsureDevTenant(ctx, reg, log))
	moved, err := reg.Get(ctx, devstack.DevTenant)
	require.NoError(t, err)
	assert.Equal(t, a.DevUser, moved.User)
	assert.NotEmpty(t, moved.Account)
	assert.Equal(t, int64(3), moved.MaxQueued)
}

// WriteServerFiles writes the NATS server's operator config and Redis's
// ACL, 0600, beside the credentials.
func TestWriteServerFiles(t *testing.T) {
	t.Parallel()
	a, err := devstack.LoadOrCreateAuth(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, a.WriteServerFiles("/data/jwt"))
	conf, err := os.ReadFile(filepath.Join(a.Dir, "nats-auth.conf"))
	require.NoError(t, err)
	assert.Contains(t, string(conf), "operator: "+a.Authority.OperatorJWT())
	assert.Contains(t, string(conf), `dir: "/data/jwt"`)
	acl, err := os.ReadFile(filepath.Join(a.Dir, "redis-users.acl"))
	require.NoError(t, err)
	assert.Equal(t, "user default off\nuser paddock on >"+a.RedisPassword+" ~* &* +@all\n", string(acl))
	for _, f := range []string{"nats-auth.conf", "redis-users.acl"} {
		fi, err := os.Stat(filepath.Join(a.Dir, f))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
	}
	require.Error(t, a.WriteServerFiles("relative/jwt"), "the resolver dir is a path in the NATS server's filesystem: absolute")
}

// The dev token file holds a token that verifies: issued when missing or
// revoked, kept while it works, and removed with the dev tenant.
func TestEnsureDevToken(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	a, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	_, url := startAuthNATS(t, a, filepath.Join(data, "nats"))
	reg := adminRegistry(t, a, url)
	ctx := context.Background()
	nc, err := nats.Connect(url, nats.UserCredentials(a.AdminCreds))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	toks, err := tenant.NewTokens(ctx, js, reg)
	require.NoError(t, err)
	path := filepath.Join(a.Dir, "dev.token")
	token := func() string {
		t.Helper()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		tok, err := toks.Verify(ctx, strings.TrimSpace(string(b)))
		require.NoError(t, err, "the file's token verifies")
		assert.Equal(t, devstack.DevTenant, tok.Tenant)
		return tok.ID
	}

	require.NoError(t, devstack.EnsureDevToken(ctx, toks, reg, path))
	assert.NoFileExists(t, path, "no dev tenant, no token")
	require.NoError(t, a.EnsureDevTenant(ctx, reg, slog.New(slog.DiscardHandler)))
	require.NoError(t, devstack.EnsureDevToken(ctx, toks, reg, path))
	first := token()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.NoError(t, devstack.EnsureDevToken(ctx, toks, reg, path))
	assert.Equal(t, first, token(), "a working token is kept")

	require.NoError(t, toks.Revoke(ctx, devstack.DevTenant, first))
	require.NoError(t, devstack.EnsureDevToken(ctx, toks, reg, path))
	assert.NotEqual(t, first, token(), "a revoked token is replaced")

	require.NoError(t, reg.Delete(ctx, devstack.DevTenant))
	require.NoError(t, devstack.EnsureDevToken(ctx, toks, reg, path))
	assert.NoFileExists(t, path, "the dev tenant removed, its token file goes")
}
