package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/tenant"
)

// A tenant of a version before tenant accounts (a user of PADDOCK) is
// moved into its own account by `paddock tenant migrate`: its old
// credentials stop working, `tenant creds` gives it new ones that submit,
// and issuing again revokes the previous ones.
func TestTenantMigrateAndReissue(t *testing.T) {
	s := startUp(t)
	legacy, pub := legacyCreds(t, filepath.Join(s.dir, "auth"), "old")
	adminNC, err := nats.Connect(s.natsURL, nats.UserCredentials(filepath.Join(s.dir, "auth", "creds", "admin.creds")))
	require.NoError(t, err)
	defer adminNC.Close()
	js, err := jetstream.New(adminNC)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := tenant.NewRegistry(ctx, js)
	require.NoError(t, err)
	require.NoError(t, reg.Create(ctx, tenant.Tenant{Name: "old", User: pub, CreatedAt: time.Now()}))
	nc, err := nats.Connect(s.natsURL, nats.UserCredentials(legacy), nats.NoReconnect())
	require.NoError(t, err, "the control: the old tenant's user connects before the migration")
	nc.Close()

	code, _, errOut := s.cli(t, "tenant", "migrate")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, errOut, "paddock tenant creds old")
	_, err = nats.Connect(s.natsURL, nats.UserCredentials(legacy), nats.NoReconnect())
	require.ErrorIs(t, err, nats.ErrAuthorization, "its user of the shared account is revoked")
	rec, err := reg.Get(ctx, "old")
	require.NoError(t, err)
	assert.True(t, nkeys.IsValidPublicAccountKey(rec.Account), "its record names its account")
	code, _, errOut = s.cli(t, "tenant", "migrate")
	require.Equal(t, exitOK, code, errOut)
	assert.NotContains(t, errOut, "moved", "a second run moves nothing")

	first := filepath.Join(s.dir, "old-1.creds")
	code, _, errOut = s.cli(t, "tenant", "creds", "old", "--out", first)
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut := s.cli(t, "--creds", first, "submit", "--wait", "--", "echo migrated")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "migrated")

	second := filepath.Join(s.dir, "old-2.creds")
	code, _, errOut = s.cli(t, "tenant", "creds", "old", "--out", second)
	require.Equal(t, exitOK, code, errOut)
	_, err = nats.Connect(s.natsURL, nats.UserCredentials(first), nats.NoReconnect())
	require.ErrorIs(t, err, nats.ErrAuthorization, "issuing again revokes the previous credentials")
	code, out, errOut = s.cli(t, "--creds", second, "submit", "--wait", "--", "echo again")
	require.Equal(t, exitOK, code, errOut)
	assert.True(t, strings.Contains(out, "again"), out)
}

// legacyCreds writes the credentials an older version issued to tenant
// name (testsvc.LegacyTenantCreds, with the tenant's grant) and returns
// their path and the user's public key.
func legacyCreds(t *testing.T, authDir, name string) (string, string) {
	t.Helper()
	perms, err := tenant.Permissions(tenant.RoleTenant, name)
	require.NoError(t, err)
	creds := testsvc.LegacyTenantCreds(t, authDir, name, perms)
	u, err := tenant.UserOfCreds(creds)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name+"-legacy.creds")
	require.NoError(t, tenant.WriteCreds(path, creds))
	return path, u.Key
}
