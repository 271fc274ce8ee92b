package tenant_test

import (
	"context"
	"fmt"
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

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

// gatewaySetup is a server whose authority has the gateway key, pushed to
// the running server as an upgraded deployment does, and a Minter.
func gatewaySetup(t *testing.T, cfg tenant.MinterConfig) (*setup, *tenant.Minter) {
	t.Helper()
	s := newSetup(t)
	changed, err := s.auth.EnsureGatewayKey()
	require.NoError(t, err)
	require.True(t, changed, "a new authority has no gateway key yet")
	s.push(t)
	seed, err := s.auth.GatewaySeed()
	require.NoError(t, err)
	m, err := tenant.NewMinter(s.auth.TenantAccountKey, seed, cfg)
	require.NoError(t, err)
	return s, m
}

// push sends the authority's account JWT to the server.
func (s *setup) push(t *testing.T) {
	t.Helper()
	sysCreds, _, err := s.auth.IssueSystemUser()
	require.NoError(t, err)
	sys := mustDial(t, s.url, writeCreds(t, sysCreds))
	require.NoError(t, s.auth.PushAccount(context.Background(), sys.Conn))
	sys.Close()
}

// probe is one subject a user publishes or subscribes to.
type probe struct {
	sub     bool // a subscription, else a publish
	subject string
}

func (p probe) String() string {
	if p.sub {
		return "sub " + p.subject
	}
	return "pub " + p.subject
}

// Subjects the probes end with: every user of these tests is refused both.
var sentinels = map[bool]string{false: "paddock.probe.sentinel", true: "paddock.probe.sentinel-sub"}

// allowed tells whether the server lets c do p. The server reports
// violations to one connection in order, so once the violation of a
// sentinel that no one may use arrives, p's would have arrived before it.
func allowed(t *testing.T, c *conn, p probe) bool {
	t.Helper()
	for _, subj := range []string{p.subject, sentinels[p.sub]} {
		if p.sub {
			_, err := c.SubscribeSync(subj)
			require.NoError(t, err)
		} else {
			require.NoError(t, c.Publish(subj, nil))
		}
	}
	kind := map[bool]string{false: "Publish", true: "Subscription"}[p.sub]
	refused := false
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			switch msg := err.Error(); {
			case strings.Contains(msg, fmt.Sprintf("%s to %q", kind, sentinels[p.sub])):
				return !refused
			case strings.Contains(msg, fmt.Sprintf("%s to %q", kind, p.subject)):
				refused = true
			}
		case <-deadline:
			t.Fatalf("%s: the sentinel's violation never came", p)
			return false
		}
	}
}

// tenantProbes are what a tenant alpha may do (true) or not (false).
func tenantProbes() map[probe]bool {
	res := "$JS.API.DIRECT.GET." + job.ResultsStream("alpha") + "."
	resB := "$JS.API.DIRECT.GET." + job.ResultsStream("beta") + "."
	return map[probe]bool{
		{false, job.SubmitSubject("alpha")}:                               true,
		{false, job.CancelRequestSubject("alpha")}:                        true,
		{false, res + job.ResultSubject("alpha", "j1")}:                   true,
		{false, "$JS.API.STREAM.INFO." + job.OutputStream("alpha")}:       true,
		{false, "$O." + job.InBucket("alpha") + ".C.x"}:                   true,
		{true, job.InboxPrefix("alpha") + ".x"}:                           true,
		{true, job.ResultSubjects("alpha")}:                               true,
		{true, job.OutputSubjects("alpha")}:                               true,
		{false, job.SubmitSubject("beta")}:                                false,
		{false, job.CancelRequestSubject("beta")}:                         false,
		{false, job.ResultSubject("alpha", "j1")}:                         false, // a forged result
		{false, resB + job.ResultSubject("beta", "j1")}:                   false,
		{false, "$JS.API.STREAM.INFO." + job.OutputStream("beta")}:        false,
		{false, "$JS.API.STREAM.DELETE." + job.OutputStream("alpha")}:     false,
		{false, "$O." + job.OutBucket("alpha") + ".C.x"}:                  false,
		{false, "$KV." + tenant.TokensBucket + ".x"}:                      false,
		{false, "$JS.API.DIRECT.GET.KV_" + tenant.RegistryBucket + ".>"}:  false,
		{false, "$KV." + tenant.SessionsBucket + ".x"}:                    false,
		{false, "$JS.API.STREAM.CREATE.KV_" + tenant.SessionsBucket}:      false,
		{true, job.InboxPrefix("beta") + ".x"}:                            false,
		{true, tenant.GatewayInboxPrefix + ".x"}:                          false,
		{true, job.ResultSubjects("beta")}:                                false,
		{true, ">"}:                                                       false,
		{true, "paddock.>"}:                                               false,
		{false, ">"}:                                                      false,
		{false, "$JS.API.STREAM.CREATE." + job.JobsStream("alpha")}:       false,
		{false, "$JS.API.CONSUMER.CREATE." + job.JobsStream("alpha")}:     false,
		{false, "$JS.API.STREAM.PURGE.OBJ_" + job.OutBucket("alpha")}:     false,
		{false, "$JS.API.STREAM.INFO." + "KV_" + tenant.RegistryBucket}:   false,
		{false, "$JS.API.DIRECT.GET.OBJ_" + job.OutBucket("beta") + ".x"}: false,
	}
}

// The gateway's user of a tenant may do exactly what the tenant's own user
// may do, probe by probe.
func TestMintedUserHasExactlyTheTenantsPermissions(t *testing.T) {
	t.Parallel()
	s, m := gatewaySetup(t, tenant.MinterConfig{})
	own, _ := s.tenantConn(t, "alpha")
	minted := mustDial(t, s.url, "", m.Option("alpha"))
	for p, want := range tenantProbes() {
		assert.Equal(t, want, allowed(t, own, p), "the tenant's own user: %s", p)
		assert.Equal(t, want, allowed(t, minted, p), "the gateway's user of the tenant: %s", p)
	}
}

func TestMintedUserSubmitsAndReadsAsItsTenant(t *testing.T) {
	t.Parallel()
	s, m := gatewaySetup(t, tenant.MinterConfig{})
	_, adminJS := s.admin(t)
	tenantStreams(t, adminJS)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := adminJS.Publish(ctx, job.ResultSubject("alpha", "j0"), []byte("result of alpha"))
	require.NoError(t, err)
	minted := mustDial(t, s.url, "", m.Option("alpha"))
	js, err := jetstream.New(minted.Conn)
	require.NoError(t, err)

	ack, err := js.Publish(ctx, job.SubmitSubject("alpha"), []byte(`{"id":"j1"}`))
	require.NoError(t, err, "the gateway submits as alpha")
	assert.Equal(t, job.JobsStream("alpha"), ack.Stream)
	msg, err := directGet(minted.Conn, job.ResultSubject("alpha", "j0"))
	require.NoError(t, err, "and reads alpha's result, its reply on alpha's inbox")
	assert.Equal(t, "result of alpha", string(msg.Data))

	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	_, err = js.Publish(short, job.SubmitSubject("beta"), []byte(`{"id":"j1"}`))
	assert.Error(t, err)
	minted.waitErr(t, `Publish to "paddock.jobs.submit.beta"`)
	assert.Zero(t, streamMsgs(t, adminJS, job.JobsStream("beta")), "nothing reached beta's stream")

	// The server sees a tenant user of alpha.
	token, kp, err := m.Creds("alpha", time.Minute)
	require.NoError(t, err)
	uc, err := jwt.DecodeUserClaims(token)
	require.NoError(t, err)
	userSeed, err := kp.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(token, userSeed)
	require.NoError(t, err)
	got, err := tenant.TenantOfCreds(creds)
	require.NoError(t, err)
	assert.Equal(t, "alpha", got)
	alphaAccount, err := s.auth.TenantAccountKey("alpha")
	require.NoError(t, err)
	assert.Equal(t, alphaAccount, uc.IssuerAccount, "a user of alpha's own account")
	assert.Equal(t, s.auth.GatewayKey(), uc.Issuer)
	assert.True(t, uc.HasEmptyPermissions(), "no permissions of its own")
}

// signWithGatewayKey signs claims with the gateway key, as a holder of the
// key could, and returns the connection's error.
func signWithGatewayKey(t *testing.T, s *setup, edit func(*jwt.UserClaims)) error {
	t.Helper()
	seed, err := s.auth.GatewaySeed()
	require.NoError(t, err)
	gk, err := nkeys.FromSeed(seed)
	require.NoError(t, err)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.IssuerAccount, err = s.auth.TenantAccountKey("alpha")
	require.NoError(t, err)
	uc.SetScoped(true)
	edit(uc)
	token, err := uc.Encode(gk)
	require.NoError(t, err)
	userSeed, err := user.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(token, userSeed)
	require.NoError(t, err)
	c, err := dial(t, s.url, writeCreds(t, creds))
	if err == nil {
		c.Close()
	}
	return err
}

// A user of the gateway key gets the template's permissions or none: the
// server refuses one that carries permissions or limits of its own, so a
// holder of the key cannot widen them.
func TestGatewayKeyCannotGrantMore(t *testing.T) {
	t.Parallel()
	s, _ := gatewaySetup(t, tenant.MinterConfig{})
	alpha := func(uc *jwt.UserClaims) { uc.Tags.Add(tenant.TagTenantPrefix + "alpha") }
	require.NoError(t, signWithGatewayKey(t, s, alpha), "the control: a plain user of the key connects")

	for name, edit := range map[string]func(*jwt.UserClaims){
		"pub >":       func(uc *jwt.UserClaims) { alpha(uc); uc.Pub.Allow.Add(">") },
		"sub >":       func(uc *jwt.UserClaims) { alpha(uc); uc.Sub.Allow.Add(">") },
		"deny only":   func(uc *jwt.UserClaims) { alpha(uc); uc.Pub.Deny.Add("nothing") },
		"limits":      func(uc *jwt.UserClaims) { alpha(uc); uc.Subs = 10 },
		"no issuer":   func(uc *jwt.UserClaims) { alpha(uc); uc.IssuerAccount = "" },
		"in PADDOCK":  func(uc *jwt.UserClaims) { alpha(uc); uc.IssuerAccount = s.auth.AccountKey() },
		"bearer":      func(uc *jwt.UserClaims) { alpha(uc); uc.BearerToken = true },
		"unscoped NL": func(uc *jwt.UserClaims) { alpha(uc); uc.SetScoped(false) },
	} {
		requireAuthViolation(t, signWithGatewayKey(t, s, edit), name)
	}
}

// A user of the gateway key is a user of the account that names it: its
// tags cannot make it another tenant's (the scope is the account's, not a
// template of the tags).
func TestGatewayUserIsItsAccountsTenant(t *testing.T) {
	t.Parallel()
	s, _ := gatewaySetup(t, tenant.MinterConfig{})
	seed, err := s.auth.GatewaySeed()
	require.NoError(t, err)
	gk, err := nkeys.FromSeed(seed)
	require.NoError(t, err)
	alphaAccount, err := s.auth.TenantAccountKey("alpha")
	require.NoError(t, err)
	for _, tags := range [][]string{nil, {tenant.TagRolePrefix + "admin"}, {tenant.TagTenantPrefix + "beta"}} {
		user, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, _ := user.PublicKey()
		uc := jwt.NewUserClaims(pub)
		uc.IssuerAccount = alphaAccount
		uc.SetScoped(true)
		uc.Tags.Add(tags...)
		token, err := uc.Encode(gk)
		require.NoError(t, err)
		c := mustDial(t, s.url, "", nats.UserJWT(
			func() (string, error) { return token, nil }, func(n []byte) ([]byte, error) { return user.Sign(n) }))
		for p, want := range tenantProbes() {
			assert.Equal(t, want, allowed(t, c, p), "tags %v: %s", tags, p)
		}
		for _, p := range []probe{{false, "_INBOX.x"}, {true, "_INBOX.>"}, {false, "$JS.API.INFO"}} {
			assert.False(t, allowed(t, c, p), "tags %v: %s", tags, p)
		}
	}
}

func TestGatewayKeyTemplateIsTheTenantGrant(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	assert.Empty(t, a.GatewayKey())
	_, err = a.GatewaySeed()
	require.ErrorIs(t, err, tenant.ErrAuthority)
	changed, err := a.EnsureGatewayKey()
	require.NoError(t, err)
	require.True(t, changed)
	changed, err = a.EnsureGatewayKey()
	require.NoError(t, err)
	assert.False(t, changed, "the key and its template are in place")

	ac, err := jwt.DecodeAccountClaims(a.AccountJWT())
	require.NoError(t, err)
	assert.Empty(t, ac.SigningKeys, "PADDOCK has no gateway key: the gateway acts only as tenants")

	// A tenant's account has the key, scoped to exactly its grant.
	_, pub, err := a.IssueUser(tenant.RoleTenant, "dev", "")
	require.NoError(t, err)
	scopeOf := func() *jwt.UserScope {
		token, ok := a.TenantAccountJWT("dev")
		require.True(t, ok)
		tc, err := jwt.DecodeAccountClaims(token)
		require.NoError(t, err)
		require.Len(t, tc.SigningKeys, 1)
		scope, ok := tc.SigningKeys[a.GatewayKey()].(*jwt.UserScope)
		require.True(t, ok, "a scoped key")
		return scope
	}
	scope := scopeOf()
	assert.Equal(t, tenant.GatewayKeyRole, scope.Role)
	want, err := tenant.Permissions(tenant.RoleTenant, "dev")
	require.NoError(t, err)
	assert.Equal(t, []string(want.Pub.Allow), []string(scope.Template.Pub.Allow))
	assert.Equal(t, []string(want.Sub.Allow), []string(scope.Template.Sub.Allow))
	assert.Empty(t, scope.Template.Pub.Deny)
	assert.Empty(t, scope.Template.Sub.Deny)
	assert.Nil(t, scope.Template.Resp)
	assert.False(t, scope.Template.BearerToken)

	// A revocation re-signs the account and keeps the key.
	require.NoError(t, a.RevokeTenantUser("dev", pub))
	assert.Equal(t, tenant.GatewayKeyRole, scopeOf().Role)
	changed, err = a.EnsureGatewayKey()
	require.NoError(t, err)
	assert.False(t, changed)
}

func TestGatewayKeyIsSavedAndLoaded(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, a.Save(dir))
	old, err := tenant.LoadAuthority(dir)
	require.NoError(t, err, "an authority saved before the gateway key loads")
	assert.Empty(t, old.GatewayKey())
	changed, err := old.EnsureGatewayKey()
	require.NoError(t, err)
	require.True(t, changed, "adding the key re-signs the account")
	require.NoError(t, old.Save(dir))
	fi, err := os.Stat(filepath.Join(dir, tenant.GatewayKeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	b, err := tenant.LoadAuthority(dir)
	require.NoError(t, err)
	assert.Equal(t, old.GatewayKey(), b.GatewayKey())
	assert.Equal(t, old.AccountJWT(), b.AccountJWT())
	changed, err = b.EnsureGatewayKey()
	require.NoError(t, err)
	assert.False(t, changed, "a loaded key and template are the same")

	m, err := tenant.LoadMinter(b.TenantAccountKey, filepath.Join(dir, tenant.GatewayKeyFile), tenant.MinterConfig{})
	require.NoError(t, err)
	assert.Equal(t, b.GatewayKey(), m.Key())
	require.NoError(t, os.Chmod(filepath.Join(dir, tenant.GatewayKeyFile), 0o640))
	_, err = tenant.LoadAuthority(dir)
	require.ErrorIs(t, err, tenant.ErrInsecureFile)
	_, err = tenant.LoadMinter(b.TenantAccountKey, filepath.Join(dir, tenant.GatewayKeyFile), tenant.MinterConfig{})
	require.ErrorIs(t, err, tenant.ErrInsecureFile)

	// A user seed is no signing key.
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	userSeed, err := user.Seed()
	require.NoError(t, err)
	require.NoError(t, os.Chmod(filepath.Join(dir, tenant.GatewayKeyFile), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, tenant.GatewayKeyFile), append(userSeed, '\n'), 0o600))
	_, err = tenant.LoadAuthority(dir)
	require.ErrorIs(t, err, tenant.ErrAuthority)
}

// Deleting gateway.nk and ensuring the key again replaces it: the servers
// close the old key's connections and refuse its users.
func TestReplacingTheGatewayKey(t *testing.T) {
	t.Parallel()
	s, oldMinter := gatewaySetup(t, tenant.MinterConfig{})
	live := mustDial(t, s.url, "", oldMinter.Option("alpha"))
	dir := t.TempDir()
	require.NoError(t, s.auth.Save(dir))
	require.NoError(t, os.Remove(filepath.Join(dir, tenant.GatewayKeyFile)))
	a, err := tenant.LoadAuthority(dir)
	require.NoError(t, err)
	changed, err := a.EnsureGatewayKey()
	require.NoError(t, err)
	require.True(t, changed)
	assert.NotEqual(t, oldMinter.Key(), a.GatewayKey())
	token, ok := a.TenantAccountJWT("alpha")
	require.True(t, ok)
	ac, err := jwt.DecodeAccountClaims(token)
	require.NoError(t, err)
	assert.Len(t, ac.SigningKeys, 1, "the old key is gone from the account")
	assert.Contains(t, ac.SigningKeys, a.GatewayKey())
	s.auth = a
	s.push(t)

	select {
	case <-live.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the old key's connection was not closed")
	}
	_, err = dial(t, s.url, "", oldMinter.Option("alpha"))
	requireAuthViolation(t, err, "the old key signs no more users")
	seed, err := a.GatewaySeed()
	require.NoError(t, err)
	m, err := tenant.NewMinter(a.TenantAccountKey, seed, tenant.MinterConfig{})
	require.NoError(t, err)
	c := mustDial(t, s.url, "", m.Option("alpha"))
	assert.True(t, allowed(t, c, probe{false, job.SubmitSubject("alpha")}))
}

// The server closes a connection whose JWT expired; Option's connection
// comes back with a new one each time.
func TestMintedConnectionOutlivesItsJWTs(t *testing.T) {
	t.Parallel()
	s, m := gatewaySetup(t, tenant.MinterConfig{TTL: 2 * time.Second})
	reconnected := make(chan struct{}, 8)
	reconnect := func(o *nats.Options) error { o.AllowReconnect = true; return nil }
	c, err := dial(t, s.url, "", m.Option("alpha"), reconnect, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	require.NoError(t, err)
	for i := range 2 {
		select {
		case <-reconnected:
		case <-time.After(15 * time.Second):
			t.Fatalf("no reconnect %d after the JWT expired", i+1)
		}
	}
	assert.ErrorIs(t, c.waitErr(t, "expired"), nats.ErrAuthExpired, "the server ended the expired user")
	assert.True(t, allowed(t, c, probe{false, job.SubmitSubject("alpha")}), "the new user is alpha's")
	assert.False(t, allowed(t, c, probe{false, job.SubmitSubject("beta")}))
}

func TestMinterRefusesBadInput(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	_, err = a.EnsureGatewayKey()
	require.NoError(t, err)
	seed, err := a.GatewaySeed()
	require.NoError(t, err)
	userSeed := func() []byte {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		s, err := kp.Seed()
		require.NoError(t, err)
		return s
	}()
	for name, tc := range map[string]struct {
		accounts tenant.AccountLookup
		seed     []byte
		ttl      time.Duration
	}{
		"no lookup":     {nil, seed, 0},
		"user seed":     {a.TenantAccountKey, userSeed, 0},
		"no seed":       {a.TenantAccountKey, []byte("nope"), 0},
		"ttl too short": {a.TenantAccountKey, seed, time.Millisecond},
		"ttl too long":  {a.TenantAccountKey, seed, 25 * time.Hour},
	} {
		_, err := tenant.NewMinter(tc.accounts, tc.seed, tenant.MinterConfig{TTL: tc.ttl})
		assert.ErrorIs(t, err, tenant.ErrMint, name)
	}
	// A lookup that names no account (a tenant of an older version).
	noAccount, err := tenant.NewMinter(func(string) (string, error) { return "", nil }, seed, tenant.MinterConfig{})
	require.NoError(t, err)
	_, _, err = noAccount.Creds("alpha", time.Minute)
	assert.ErrorIs(t, err, tenant.ErrMint)

	m, err := tenant.NewMinter(a.TenantAccountKey, seed, tenant.MinterConfig{})
	require.NoError(t, err)
	for _, bad := range []string{"", "*", ">", "a.>", "Alpha", "alpha.beta", "a b", strings.Repeat("a", 33)} {
		_, _, err := m.Creds(bad, time.Minute)
		assert.ErrorIs(t, err, tenant.ErrMint, "%q", bad)
		assert.ErrorIs(t, err, job.ErrInvalidTenant, "%q", bad)
		_, err = nats.Connect("nats://127.0.0.1:1", m.Option(bad))
		assert.ErrorIs(t, err, tenant.ErrMint, "Option(%q)", bad)
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond, 25 * time.Hour} {
		_, _, err := m.Creds("alpha", ttl)
		assert.ErrorIs(t, err, tenant.ErrMint, "%s", ttl)
	}
	before := time.Now()
	token, kp, err := m.Creds("alpha", time.Minute)
	require.NoError(t, err)
	uc, err := jwt.DecodeUserClaims(token)
	require.NoError(t, err)
	assert.Equal(t, publicKeyOf(t, kp), uc.Subject)
	assert.GreaterOrEqual(t, uc.Expires, before.Add(time.Minute).Unix(), "never shorter than asked")
	assert.ElementsMatch(t, []string{"paddock-role:tenant", "paddock-tenant:alpha"}, []string(uc.Tags))
}

func publicKeyOf(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return pub
}

// BenchmarkMinterCreds is the cost of minting one user (a key pair and a
// signed JWT), paid on every connect and reconnect of Option.
func BenchmarkMinterCreds(b *testing.B) {
	a, err := tenant.NewAuthority()
	require.NoError(b, err)
	_, err = a.EnsureGatewayKey()
	require.NoError(b, err)
	seed, err := a.GatewaySeed()
	require.NoError(b, err)
	m, err := tenant.NewMinter(a.TenantAccountKey, seed, tenant.MinterConfig{})
	require.NoError(b, err)
	for b.Loop() {
		if _, _, err := m.Creds("alpha", time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}
