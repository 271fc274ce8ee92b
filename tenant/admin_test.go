package tenant_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/tenant"
)

// adminSetup is a setup whose authority is saved in an auth dir with the
// system user's credentials (paddock up's layout), and an Admin over an
// admin user's connection that records the streams it was asked for.
type adminSetup struct {
	*setup
	authDir string
	admin   *tenant.Admin

	mu      sync.Mutex
	streams []tenant.Tenant
}

func newAdminSetup(t *testing.T) *adminSetup {
	t.Helper()
	s := &adminSetup{setup: newSetup(t), authDir: t.TempDir()}
	require.NoError(t, s.auth.Save(s.authDir))
	sys, _, err := s.auth.IssueSystemUser()
	require.NoError(t, err)
	require.NoError(t, tenant.WriteCreds(tenant.SystemCredsFile(s.authDir), sys))
	s.admin = s.newAdmin(t, tenant.AdminConfig{AuthDir: s.authDir, Streams: s.recordStreams})
	return s
}

// newAdmin is an Admin with cfg over a new admin user's connection.
func (s *adminSetup) newAdmin(t *testing.T, cfg tenant.AdminConfig) *tenant.Admin {
	t.Helper()
	_, js := s.setup.admin(t)
	ad, err := tenant.NewAdmin(context.Background(), js, cfg)
	require.NoError(t, err)
	return ad
}

// recordStreams is the Admin's AdminConfig.Streams: it records t.
func (s *adminSetup) recordStreams(_ context.Context, t tenant.Tenant) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams = append(s.streams, t)
	return nil
}

func (s *adminSetup) streamsAskedFor() []tenant.Tenant {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]tenant.Tenant(nil), s.streams...)
}

// waitClosed waits for c's connection to be closed by the server.
func waitClosed(t *testing.T, c *conn, why string) {
	t.Helper()
	select {
	case <-c.closed:
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

// A tenant added through the Admin connects at once (its new account was
// pushed first), gets its streams before its record, takes new quotas,
// and once removed is disconnected, refused, and has no tokens left.
func TestAdminAddSetRemove(t *testing.T) {
	t.Parallel()
	s := newAdminSetup(t)
	ctx := context.Background()

	rec, creds, err := s.admin.Add(ctx, tenant.Tenant{Name: "gamma", MaxQueued: 5})
	require.NoError(t, err)
	assert.True(t, nkeys.IsValidPublicAccountKey(rec.Account), "its record names its own account")
	assert.True(t, nkeys.IsValidPublicUserKey(rec.User))
	got, err := s.admin.Registry().Get(ctx, "gamma")
	require.NoError(t, err)
	assert.Equal(t, rec.User, got.User)
	u, err := tenant.UserOfCreds(creds)
	require.NoError(t, err)
	assert.Equal(t, rec.User, u.Key)
	live := mustDial(t, s.url, writeCreds(t, creds), nats.CustomInboxPrefix("_INBOX.gamma"))
	assert.Equal(t, []tenant.Tenant{{Name: "gamma", MaxQueued: 5, User: rec.User, Account: rec.Account}}, s.streamsAskedFor())

	_, _, err = s.admin.Add(ctx, tenant.Tenant{Name: "gamma"})
	require.ErrorIs(t, err, tenant.ErrExists)
	_, _, err = s.admin.Add(ctx, tenant.Tenant{Name: "bad name"})
	require.ErrorIs(t, err, tenant.ErrInvalid)

	set, err := s.admin.Set(ctx, "gamma", func(t *tenant.Tenant) { t.MaxQueued, t.Rate = 50, 3 })
	require.NoError(t, err)
	assert.Equal(t, int64(50), set.MaxQueued)
	assert.Equal(t, rec.User, set.User, "Set keeps the credentials")
	assert.Len(t, s.streamsAskedFor(), 2, "Set updates the streams to the new quota")
	_, err = s.admin.Set(ctx, "gamma", func(t *tenant.Tenant) { t.Rate = -1 })
	require.ErrorIs(t, err, tenant.ErrInvalid)
	all, err := s.admin.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, 3, all[0].Rate)

	toks, err := s.admin.Tokens(ctx)
	require.NoError(t, err)
	_, _, err = toks.Issue(ctx, "gamma", "ci")
	require.NoError(t, err)
	require.NoError(t, s.admin.Remove(ctx, "gamma"))
	waitClosed(t, live, "the removed tenant's live connection was not closed")
	_, err = dial(t, s.url, writeCreds(t, creds))
	requireAuthViolation(t, err, "its credentials connect no more")
	_, err = s.admin.Registry().Get(ctx, "gamma")
	require.ErrorIs(t, err, tenant.ErrNotFound)
	left, err := toks.List(ctx, "gamma")
	require.NoError(t, err)
	assert.Empty(t, left, "its gateway tokens are revoked")
	require.ErrorIs(t, s.admin.Remove(ctx, "gamma"), tenant.ErrNotFound)
}

// Reissue revokes the tenant's current user: the previous credentials stop
// working, the new ones connect.
func TestAdminReissue(t *testing.T) {
	t.Parallel()
	s := newAdminSetup(t)
	ctx := context.Background()
	_, first, err := s.admin.Add(ctx, tenant.Tenant{Name: "delta"})
	require.NoError(t, err)
	old := mustDial(t, s.url, writeCreds(t, first))

	second, err := s.admin.Reissue(ctx, "delta")
	require.NoError(t, err)
	waitClosed(t, old, "the previous user's live connection was not closed")
	_, err = dial(t, s.url, writeCreds(t, first))
	requireAuthViolation(t, err, "the previous credentials are revoked")
	mustDial(t, s.url, writeCreds(t, second))
	rec, err := s.admin.Registry().Get(ctx, "delta")
	require.NoError(t, err)
	u, err := tenant.UserOfCreds(second)
	require.NoError(t, err)
	assert.Equal(t, u.Key, rec.User, "the record names the new user")
}

// Migrate moves a tenant of a version before tenant accounts (a user of
// the shared account) into its own, revoking the old user in the
// authority the caller holds; a second call moves none.
func TestAdminMigrate(t *testing.T) {
	t.Parallel()
	s := newAdminSetup(t)
	s.admin = s.newAdmin(t, tenant.AdminConfig{AuthDir: s.authDir, Authority: s.auth})
	perms, err := tenant.Permissions(tenant.RoleTenant, "old")
	require.NoError(t, err)
	legacy := testsvc.LegacyTenantCreds(t, s.authDir, "old", perms)
	u, err := tenant.UserOfCreds(legacy)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.admin.Registry().Create(ctx, tenant.Tenant{Name: "old", User: u.Key}))
	live := mustDial(t, s.url, writeCreds(t, legacy))

	moved, err := s.admin.Migrate(ctx)
	require.NoError(t, err)
	require.Len(t, moved, 1)
	assert.Equal(t, "old", moved[0].Name)
	assert.Empty(t, moved[0].User, "it needs new credentials")
	assert.True(t, s.auth.Revoked(u.Key), "the caller's authority holds the revocation")
	waitClosed(t, live, "the old user's live connection was not closed")
	rec, err := s.admin.Registry().Get(ctx, "old")
	require.NoError(t, err)
	assert.Equal(t, moved[0].Account, rec.Account)
	loaded, err := tenant.LoadAuthority(s.authDir)
	require.NoError(t, err)
	assert.True(t, loaded.Revoked(u.Key), "the authority is saved")

	again, err := s.admin.Migrate(ctx)
	require.NoError(t, err)
	assert.Empty(t, again, "a second run moves nothing")
}

// Without the system user's credentials an account change cannot reach
// the servers: Add says so before it hands out a user they would refuse;
// without an auth dir, the Admin still lists.
func TestAdminNeedsTheSystemCredsAndAuthDir(t *testing.T) {
	t.Parallel()
	s := newAdminSetup(t)
	ctx := context.Background()
	require.NoError(t, os.Remove(tenant.SystemCredsFile(s.authDir)))
	_, _, err := s.admin.Add(ctx, tenant.Tenant{Name: "gamma"})
	require.ErrorIs(t, err, tenant.ErrNoSystemCreds)
	_, err = s.admin.Registry().Get(ctx, "gamma")
	require.ErrorIs(t, err, tenant.ErrNotFound, "no record of a tenant whose account the servers lack")

	bare := s.newAdmin(t, tenant.AdminConfig{})
	_, _, err = bare.Add(ctx, tenant.Tenant{Name: "gamma"})
	require.ErrorIs(t, err, tenant.ErrAdminConfig)
	_, err = bare.Migrate(ctx)
	require.ErrorIs(t, err, tenant.ErrAdminConfig)
	all, err := bare.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, all)
}
