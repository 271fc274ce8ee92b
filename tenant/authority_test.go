package tenant_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/tenant"
)

func TestSaveAndLoadAuthority(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	_, revoked, err := a.IssueUser(tenant.RoleTenant, "gone", "")
	require.NoError(t, err)
	require.NoError(t, a.RevokeTenantUser("gone", revoked))
	_, _, err = a.IssueUser(tenant.RoleTenant, "dev", "")
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "auth")
	require.NoError(t, a.Save(dir))

	di, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 7, "three seeds, three JWTs, the tenant accounts, no temporary file")
	for _, e := range entries {
		fi, err := e.Info()
		require.NoError(t, err)
		want := os.FileMode(0o600)
		if e.IsDir() {
			want = 0o700
		}
		assert.Equal(t, want, fi.Mode().Perm(), e.Name())
	}

	b, err := tenant.LoadAuthority(dir)
	require.NoError(t, err)
	assert.Equal(t, a.OperatorKey(), b.OperatorKey())
	assert.Equal(t, a.SystemAccountKey(), b.SystemAccountKey())
	assert.Equal(t, a.AccountKey(), b.AccountKey())
	assert.Equal(t, a.AccountJWT(), b.AccountJWT())
	assert.True(t, b.Revoked(revoked), "revocations survive a reload")
	assert.Equal(t, a.Tenants(), b.Tenants())
	for _, name := range a.Tenants() {
		aj, _ := a.TenantAccountJWT(name)
		bj, ok := b.TenantAccountJWT(name)
		assert.True(t, ok)
		assert.Equal(t, aj, bj, name)
	}

	// Users issued by the loaded authority connect to a server trusting the
	// original one.
	s := startWith(t, a)
	creds, _, err := b.IssueUser(tenant.RoleTenant, "dev", "")
	require.NoError(t, err)
	c := mustDial(t, s.url, writeCreds(t, creds))
	assert.True(t, c.IsConnected())
}

func TestSaveNarrowsAnOpenDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	require.NoError(t, a.Save(dir))
	di, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())
	require.NoError(t, a.Save(dir), "saving again replaces the files")
}

func TestLoadAuthorityRefusesAnOpenSeed(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, a.Save(dir))
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		seed := filepath.Join(dir, "account.nk")
		require.NoError(t, os.Chmod(seed, mode))
		_, err = tenant.LoadAuthority(dir)
		require.ErrorIs(t, err, tenant.ErrInsecureFile, "%04o", mode)
		assert.Contains(t, err.Error(), "chmod 600 "+seed)
		require.NoError(t, os.Chmod(seed, 0o600))
	}
	_, err = tenant.LoadAuthority(dir)
	assert.NoError(t, err, "0600 again")
}

func TestLoadAuthorityRefusesFilesThatDoNotBelongTogether(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	other, err := tenant.NewAuthority()
	require.NoError(t, err)
	dir, otherDir := t.TempDir(), t.TempDir()
	require.NoError(t, a.Save(dir))
	require.NoError(t, other.Save(otherDir))
	for _, name := range []string{"account.jwt", "sys.nk", "operator.jwt"} {
		mixed := t.TempDir()
		for _, f := range []string{"operator.nk", "operator.jwt", "sys.nk", "sys.jwt", "account.nk", "account.jwt"} {
			from := dir
			if f == name {
				from = otherDir
			}
			b, err := os.ReadFile(filepath.Join(from, f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(mixed, f), b, 0o600))
		}
		_, err = tenant.LoadAuthority(mixed)
		assert.ErrorIs(t, err, tenant.ErrAuthority, name)
	}
	require.NoError(t, os.Remove(filepath.Join(dir, "sys.jwt")))
	_, err = tenant.LoadAuthority(dir)
	assert.Error(t, err)
	_, err = tenant.LoadAuthority(filepath.Join(t.TempDir(), "none"))
	assert.Error(t, err)
}

func TestRevokeNeedsAUserKey(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	before := a.AccountJWT()
	assert.Error(t, a.Revoke(a.AccountKey()))
	assert.Error(t, a.Revoke("nope"))
	assert.Equal(t, before, a.AccountJWT(), "nothing re-signed")
}

func TestLoadOrCreateAuthority(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	a, created, err := tenant.LoadOrCreateAuthority(dir)
	require.NoError(t, err)
	assert.True(t, created)
	b, created, err := tenant.LoadOrCreateAuthority(dir)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, a.AccountKey(), b.AccountKey(), "the same authority the second time")

	require.NoError(t, os.Remove(filepath.Join(dir, "account.nk")))
	_, _, err = tenant.LoadOrCreateAuthority(dir)
	require.ErrorIs(t, err, tenant.ErrAuthority, "a partial authority is not silently replaced")
	assert.Contains(t, err.Error(), "5 of the 6")
	_, err = os.Stat(filepath.Join(dir, "operator.nk"))
	assert.NoError(t, err, "nothing was overwritten")
}

// RevokedUser sees a revocation of every user of a tenant's account
// (RevokeTenant), which Revoked, given a key only, does not; a user of
// another account is untouched.
func TestRevokedUser(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	user := func(role tenant.Role, name string) tenant.User {
		creds, _, err := a.IssueUser(role, name, "")
		require.NoError(t, err)
		u, err := tenant.UserOfCreds(creds)
		require.NoError(t, err)
		return u
	}
	alpha, beta, svc := user(tenant.RoleTenant, "alpha"), user(tenant.RoleTenant, "beta"), user(tenant.RoleWorker, "")
	assert.False(t, a.RevokedUser(alpha), "the control")

	require.NoError(t, a.RevokeTenant("alpha"))
	assert.True(t, a.RevokedUser(alpha))
	assert.False(t, a.Revoked(alpha.Key), "Revoked sees keys only")
	assert.False(t, a.RevokedUser(beta))

	require.NoError(t, a.Revoke(svc.Key))
	assert.True(t, a.RevokedUser(svc), "a key revoked in PADDOCK")
	require.NoError(t, a.RevokeTenantUser("beta", beta.Key))
	assert.True(t, a.RevokedUser(beta), "a key revoked in a tenant's account")
}
