package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
// name: a user of PADDOCK with the tenant's tags and subject permissions,
// signed with the account key in authDir. It returns their path and the
// user's public key.
func legacyCreds(t *testing.T, authDir, name string) (string, string) {
	t.Helper()
	seed, err := os.ReadFile(filepath.Join(authDir, "account.nk"))
	require.NoError(t, err)
	acc, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	require.NoError(t, err)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = "tenant:" + name
	uc.Tags.Add(tenant.TagRolePrefix+string(tenant.RoleTenant), tenant.TagTenantPrefix+name)
	perms, err := tenant.Permissions(tenant.RoleTenant, name)
	require.NoError(t, err)
	uc.Permissions = perms
	token, err := uc.Encode(acc)
	require.NoError(t, err)
	userSeed, err := user.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(token, userSeed)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name+"-legacy.creds")
	require.NoError(t, tenant.WriteCreds(path, creds))
	return path, pub
}
