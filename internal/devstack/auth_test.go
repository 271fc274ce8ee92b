package devstack_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/devstack"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

// assertPrivate checks that every file under dir is 0600 and every
// directory 0700.
func assertPrivate(t *testing.T, dir string) {
	t.Helper()
	n := 0
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := d.Info()
		require.NoError(t, err)
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		assert.Equal(t, want, fi.Mode().Perm(), path)
		n++
		return nil
	}))
	assert.Equal(t, 1+7+2+1+6+1, n, "auth, the authority and its gateway key, tenants/ and dev's account, creds/ and its 6 files, redis.password")
}

func TestLoadOrCreateAuth(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	a, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	assert.True(t, a.Created)
	assert.Equal(t, filepath.Join(data, "auth"), a.Dir)
	assertPrivate(t, a.Dir)
	assert.Len(t, a.RedisPassword, 48)
	assert.Equal(t, "paddock", a.RedisUser)
	name, err := tenant.TenantOfCredsFile(a.DevCreds)
	require.NoError(t, err)
	assert.Equal(t, devstack.DevTenant, name)
	assert.False(t, a.AccountChanged, "a new authority: no server knows an older account JWT")
	assert.Equal(t, filepath.Join(a.Dir, "gateway.nk"), a.GatewayKey)
	assert.Equal(t, filepath.Join(a.Dir, "creds", "gateway.creds"), a.GatewayCreds)
	for path, role := range map[string]tenant.Role{a.AdminCreds: tenant.RoleAdmin, a.SchedulerCreds: tenant.RoleScheduler,
		a.WorkerCreds: tenant.RoleWorker, a.GatewayCreds: tenant.RoleGateway} {
		u := userOf(t, path)
		assert.Equal(t, role, u.Role, path)
		assert.Equal(t, a.Authority.AccountKey(), u.Account, path)
	}
	assert.Equal(t, a.Authority.SystemAccountKey(), userOf(t, a.SysCreds).Account)
	before := readAll(t, a.Dir)

	b, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	assert.False(t, b.Created)
	assert.False(t, b.AccountChanged)
	assert.Equal(t, before, readAll(t, b.Dir), "a second start reuses everything")
	assert.Equal(t, a.RedisPassword, b.RedisPassword)
	assert.Equal(t, a.DevUser, b.DevUser)

	// A missing service creds file is issued again; a removed dev tenant
	// stays removed.
	require.NoError(t, os.Remove(a.SchedulerCreds))
	require.NoError(t, os.Remove(a.DevCreds))
	c, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	assert.Equal(t, tenant.RoleScheduler, userOf(t, c.SchedulerCreds).Role)
	assert.Empty(t, c.DevCreds)

	// Service creds issued before their role's grant changed (here: a
	// worker user without paddock.wake.>) are issued again; current ones
	// stay.
	stale, _, err := c.Authority.IssueUser(tenant.RoleScheduler, "", "svc:worker") // the scheduler's grant, not the worker's
	require.NoError(t, err)
	require.NoError(t, tenant.WriteCreds(c.WorkerCreds, stale))
	keptSched := userOf(t, c.SchedulerCreds).Key
	d, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	w := userOf(t, d.WorkerCreds)
	assert.True(t, w.Grant.Current(tenant.RoleWorker, ""), "the stale worker creds were issued again")
	assert.Equal(t, keptSched, userOf(t, d.SchedulerCreds).Key)

	require.NoError(t, os.Chmod(a.RedisPasswordFile, 0o644))
	_, err = devstack.LoadOrCreateAuth(data)
	require.ErrorIs(t, err, tenant.ErrInsecureFile)
	assert.Contains(t, err.Error(), "chmod 600 "+a.RedisPasswordFile)
}

// A data dir of an older version (no gateway key, dev a user of the shared
// PADDOCK account) is brought up to this one: the gateway key, and dev
// moved into its own account with new credentials, its old user revoked.
// A server already running refuses the new users until the new JWTs are
// pushed to it.
func TestLoadOrCreateAuthUpgradesAnOldDataDir(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	old, err := tenant.NewAuthority() // what an older paddock saved
	require.NoError(t, err)
	require.NoError(t, old.Save(filepath.Join(data, "auth")))
	legacy := filepath.Join(data, "auth", "creds", "dev.creds")
	require.NoError(t, tenant.WriteCreds(legacy, testsvc.LegacyTenantCreds(t, filepath.Join(data, "auth"), devstack.DevTenant, devGrant(t))))
	legacyCopy := filepath.Join(t.TempDir(), "legacy.creds")
	b, err := os.ReadFile(legacy)
	require.NoError(t, err)
	require.NoError(t, tenant.WriteCreds(legacyCopy, b))
	addr := devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}
	ns, err := devstack.StartNATS(devstack.NATSConfig{Addr: addr, StoreDir: filepath.Join(data, "nats"), Auth: old})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	url := "nats://" + addr.String()
	nc, err := nats.Connect(url, nats.UserCredentials(legacyCopy), nats.NoReconnect())
	require.NoError(t, err, "the control: the old dev user connects to the old fleet")
	nc.Close()

	a, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	assert.False(t, a.Created)
	require.True(t, a.AccountChanged, "PADDOCK's exports, dev's new account")
	require.True(t, a.DevMoved)
	for _, f := range []string{a.GatewayKey, a.GatewayCreds, a.DevCreds} {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
	}
	assert.Equal(t, old.AccountKey(), a.Authority.AccountKey(), "the same fleet account")
	devAccount, err := a.Authority.TenantAccountKey(devstack.DevTenant)
	require.NoError(t, err)
	assert.Equal(t, devAccount, userOf(t, a.DevCreds).Account, "dev's new credentials are of its own account")
	m, err := tenant.LoadMinter(a.Authority.TenantAccountKey, a.GatewayKey, tenant.MinterConfig{})
	require.NoError(t, err)
	_, err = nats.Connect(url, m.Option(devstack.DevTenant), nats.NoReconnect())
	require.ErrorIs(t, err, nats.ErrAuthorization, "the running server does not know dev's account yet")

	sys, err := nats.Connect(url, nats.UserCredentials(a.SysCreds))
	require.NoError(t, err)
	defer sys.Close()
	require.NoError(t, a.Authority.PushAccount(context.Background(), sys))
	for name, opt := range map[string]nats.Option{"the gateway's user of dev": m.Option(devstack.DevTenant),
		"dev's new credentials": nats.UserCredentials(a.DevCreds)} {
		dev, err := nats.Connect(url, opt, nats.NoReconnect())
		require.NoError(t, err, name)
		dev.Close()
	}
	_, err = nats.Connect(url, nats.UserCredentials(legacyCopy), nats.NoReconnect())
	require.ErrorIs(t, err, nats.ErrAuthorization, "dev's old user of the shared account is revoked")

	b2, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	assert.False(t, b2.AccountChanged, "once upgraded, nothing changes")
	assert.False(t, b2.DevMoved)
	assert.Equal(t, a.Authority.AccountJWT(), b2.Authority.AccountJWT())
}

// devGrant is the tenant grant of dev.
func devGrant(t *testing.T) jwt.Permissions {
	t.Helper()
	p, err := tenant.Permissions(tenant.RoleTenant, devstack.DevTenant)
	require.NoError(t, err)
	return p
}

func userOf(t *testing.T, path string) tenant.User {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	u, err := tenant.UserOfCreds(b)
	require.NoError(t, err)
	return u
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	all := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			all[path] = string(b)
		}
		return err
	}))
	return all
}

func startAuthNATS(t *testing.T, a *devstack.Auth, store string) (*server.Server, string) {
	t.Helper()
	addr := devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}
	ns, err := devstack.StartNATS(devstack.NATSConfig{Addr: addr, StoreDir: store, Auth: a.Authority})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns, "nats://" + addr.String()
}

func TestAuthenticatedNATS(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	a, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	_, url := startAuthNATS(t, a, filepath.Join(data, "nats"))

	_, err = nats.Connect(url, nats.NoReconnect())
	require.ErrorIs(t, err, nats.ErrAuthorization, "an anonymous client is refused")
	assert.Contains(t, err.Error(), "Authorization Violation")

	admin, err := nats.Connect(url, nats.UserCredentials(a.AdminCreds))
	require.NoError(t, err)
	defer admin.Close()
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	ctx := context.Background()
	info, err := js.AccountInfo(ctx)
	require.NoError(t, err, "JetStream is on in the PADDOCK account")
	assert.Zero(t, info.Streams)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: job.JobsStream("dev"), Subjects: []string{job.SubmitSubject("dev")}})
	require.NoError(t, err)

	dev, err := nats.Connect(url, nats.UserCredentials(a.DevCreds), nats.CustomInboxPrefix(job.InboxPrefix("dev")))
	require.NoError(t, err)
	defer dev.Close()
	djs, err := jetstream.New(dev)
	require.NoError(t, err)
	ack, err := djs.Publish(ctx, job.SubmitSubject("dev"), []byte("spec"))
	require.NoError(t, err, "the dev tenant submits")
	assert.Equal(t, job.JobsStream("dev"), ack.Stream)

	// Revoke dev over the system account: its next connection is refused.
	sys, err := nats.Connect(url, nats.UserCredentials(a.SysCreds))
	require.NoError(t, err)
	defer sys.Close()
	require.NoError(t, a.Authority.RevokeTenantUser(devstack.DevTenant, a.DevUser))
	require.NoError(t, a.Authority.PushAccount(ctx, sys))
	_, err = nats.Connect(url, nats.UserCredentials(a.DevCreds), nats.NoReconnect())
	require.ErrorIs(t, err, nats.ErrAuthorization)
}

func TestAuthenticatedNATSAfterARestart(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	a, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	ns, url := startAuthNATS(t, a, filepath.Join(data, "nats"))
	admin, err := nats.Connect(url, nats.UserCredentials(a.AdminCreds))
	require.NoError(t, err)
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept"}})
	require.NoError(t, err)
	admin.Close()
	ns.Shutdown()
	ns.WaitForShutdown()

	b, err := devstack.LoadOrCreateAuth(data)
	require.NoError(t, err)
	_, url = startAuthNATS(t, b, filepath.Join(data, "nats"))
	admin, err = nats.Connect(url, nats.UserCredentials(b.AdminCreds))
	require.NoError(t, err, "the kept creds still work")
	defer admin.Close()
	js, err = jetstream.New(admin)
	require.NoError(t, err)
	_, err = js.Stream(context.Background(), "KEPT")
	assert.NoError(t, err, "the stream survived in the PADDOCK account")
}

func TestRedisWithPassword(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "redis")
	const pw = "3f1c9e0d2b7a4c5e8f60a1b2c3d4e5f6"
	ra := devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}
	opts, err := redis.ParseURL("redis://paddock:" + pw + "@" + ra.String())
	require.NoError(t, err)
	good := redis.NewClient(opts)
	defer good.Close()
	r, err := devstack.StartRedis(context.Background(), devstack.RedisConfig{Addr: ra, Dir: dir, Password: pw,
		Ping: func(ctx context.Context, _ devstack.Addr) error { return good.Ping(ctx).Err() }})
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	ctx := context.Background()
	require.NoError(t, good.Set(ctx, "k", "v", 0).Err(), "the paddock user may write")
	require.NoError(t, good.Publish(ctx, "channel", "m").Err(), "and publish")

	anon := redis.NewClient(&redis.Options{Addr: ra.String()})
	defer anon.Close()
	err = anon.Get(ctx, "k").Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOAUTH", "no password, no access")

	wrong := redis.NewClient(&redis.Options{Addr: ra.String(), Username: "paddock", Password: "guess"})
	defer wrong.Close()
	err = wrong.Ping(ctx).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WRONGPASS")
	deflt := redis.NewClient(&redis.Options{Addr: ra.String(), Password: pw})
	defer deflt.Close()
	assert.Error(t, deflt.Ping(ctx).Err(), "the default user is off, even with the password")

	cmdline, err := os.ReadFile("/proc/" + itoa(r.Pid()) + "/cmdline")
	require.NoError(t, err)
	assert.Contains(t, string(cmdline), "redis-server", "the right process")
	assert.NotContains(t, string(cmdline), pw, "the password is in no argument")
	fi, err := os.Stat(filepath.Join(dir, "redis.conf"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestRedisRefusesAPasswordThatWouldBreakItsConfig(t *testing.T) {
	t.Parallel()
	for _, pw := range []string{"two words", "line\nuser evil on nopass", `quo"te`} {
		_, err := devstack.StartRedis(context.Background(), devstack.RedisConfig{Addr: devstack.Addr{Host: "127.0.0.1", Port: freePort(t)},
			Dir: t.TempDir(), Password: pw, Ping: func(context.Context, devstack.Addr) error { return errors.New("never") }})
		require.Error(t, err, "%q", pw)
		assert.Contains(t, err.Error(), "must not hold spaces")
		assert.NotContains(t, err.Error(), pw)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
