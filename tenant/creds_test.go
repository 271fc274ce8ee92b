package tenant_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/tenant"
)

func TestIssuedUsers(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	creds, pub, err := a.IssueUser(tenant.RoleTenant, "dev", "")
	require.NoError(t, err)
	u, err := tenant.UserOfCreds(creds)
	require.NoError(t, err)
	grant, err := tenant.GrantOf(tenant.RoleTenant, "dev")
	require.NoError(t, err)
	devAccount, err := a.TenantAccountKey("dev")
	require.NoError(t, err)
	assert.NotEqual(t, a.AccountKey(), devAccount)
	assert.Equal(t, tenant.User{Key: pub, Name: "tenant:dev", Grant: grant, Role: tenant.RoleTenant, Tenant: "dev",
		Account: devAccount, IssuedAt: u.IssuedAt}, u)
	assert.False(t, u.IssuedAt.IsZero())
	assert.True(t, u.Grant.Current(tenant.RoleTenant, "dev"))
	assert.False(t, u.Grant.Current(tenant.RoleTenant, "other"))
	old := tenant.Grant{Pub: u.Grant.Pub, Sub: u.Grant.Sub[1:]} // a grant since widened
	assert.False(t, old.Current(tenant.RoleTenant, "dev"))
	name, err := tenant.TenantOfCreds(creds)
	require.NoError(t, err)
	assert.Equal(t, "dev", name)

	token, err := jwt.ParseDecoratedJWT(creds)
	require.NoError(t, err)
	uc, err := jwt.DecodeUserClaims(token)
	require.NoError(t, err)
	assert.Contains(t, uc.Tags, "paddock-tenant:dev")
	assert.Contains(t, uc.Tags, "paddock-role:tenant")
	assert.Equal(t, devAccount, uc.Issuer, "signed by dev's own account")

	sched, _, err := a.IssueUser(tenant.RoleScheduler, "", "")
	require.NoError(t, err)
	u, err = tenant.UserOfCreds(sched)
	require.NoError(t, err)
	assert.Equal(t, "svc:scheduler", u.Name)
	_, err = tenant.TenantOfCreds(sched)
	assert.ErrorIs(t, err, tenant.ErrNotTenant)

	named, _, err := a.IssueUser(tenant.RoleAdmin, "", "ops:alice")
	require.NoError(t, err)
	u, err = tenant.UserOfCreds(named)
	require.NoError(t, err)
	assert.Equal(t, "ops:alice", u.Name)

	sys, _, err := a.IssueSystemUser()
	require.NoError(t, err)
	u, err = tenant.UserOfCreds(sys)
	require.NoError(t, err)
	assert.Equal(t, a.SystemAccountKey(), u.Account)
	_, err = tenant.TenantOfCreds(sys)
	assert.ErrorIs(t, err, tenant.ErrNotTenant)

	_, _, err = a.IssueUser(tenant.RoleTenant, "", "")
	assert.ErrorIs(t, err, tenant.ErrRole)
}

func TestCredsFiles(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	creds, _, err := a.IssueUser(tenant.RoleTenant, "dev", "")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "creds", "dev.creds")
	require.NoError(t, tenant.WriteCreds(path, creds))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())
	name, err := tenant.TenantOfCredsFile(path)
	require.NoError(t, err)
	assert.Equal(t, "dev", name)

	_, err = tenant.TenantOfCredsFile(filepath.Join(t.TempDir(), "missing.creds"))
	assert.Error(t, err)
	bad := filepath.Join(t.TempDir(), "bad.creds")
	require.NoError(t, os.WriteFile(bad, []byte("-----BEGIN NATS USER JWT-----\nnope\n------END NATS USER JWT------\n"), 0o600))
	_, err = tenant.TenantOfCredsFile(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad)
}

func FuzzTenantOfCreds(f *testing.F) {
	a, err := tenant.NewAuthority()
	require.NoError(f, err)
	creds, _, err := a.IssueUser(tenant.RoleTenant, "dev", "")
	require.NoError(f, err)
	f.Add(creds)
	f.Add([]byte("-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.e30.x\n------END NATS USER JWT------\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := tenant.TenantOfCreds(b)
		if err == nil {
			assert.NoError(t, (&tenant.Tenant{Name: name}).Validate(), "a tenant it returns is a valid name")
		}
	})
}
