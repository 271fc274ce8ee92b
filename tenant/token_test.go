package tenant_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

// tokenSetup is a server with tenants alpha and beta in the registry and
// the tokens bucket, both bound as admin.
type tokenSetup struct {
	*setup
	adminJS jetstream.JetStream
	reg     *tenant.Registry
	tokens  *tenant.Tokens
}

func newTokenSetup(t *testing.T) *tokenSetup {
	t.Helper()
	s := newSetup(t)
	_, js := s.admin(t)
	ctx := context.Background()
	reg, err := tenant.NewRegistry(ctx, js)
	require.NoError(t, err)
	for _, name := range []string{"alpha", "beta"} {
		require.NoError(t, reg.Create(ctx, tenant.Tenant{Name: name}))
	}
	ts, err := tenant.NewTokens(ctx, js, reg)
	require.NoError(t, err)
	return &tokenSetup{setup: s, adminJS: js, reg: reg, tokens: ts}
}

var secretShape = regexp.MustCompile(`^pdk_[a-z2-7]{52}$`)

func TestTokensIssueVerifyRevoke(t *testing.T) {
	t.Parallel()
	s := newTokenSetup(t)
	ctx := context.Background()
	secret, tok, err := s.tokens.Issue(ctx, "alpha", "ci runner")
	require.NoError(t, err)
	assert.Regexp(t, secretShape, secret)
	sum := sha256.Sum256([]byte(secret))
	key := hex.EncodeToString(sum[:])
	assert.Equal(t, key[:12], tok.ID)
	assert.Equal(t, "alpha", tok.Tenant)
	assert.Equal(t, "ci runner", tok.Label)
	assert.WithinDuration(t, time.Now(), tok.CreatedAt, time.Minute)

	got, err := s.tokens.Verify(ctx, secret)
	require.NoError(t, err)
	assert.Equal(t, tok.ID, got.ID)
	assert.Equal(t, "alpha", got.Tenant)
	assert.True(t, tok.CreatedAt.Equal(got.CreatedAt))

	// Only the hash is stored: the key is the secret's SHA-256, and the
	// record holds exactly the public fields.
	kv, err := s.adminJS.KeyValue(ctx, tenant.TokensBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, key)
	require.NoError(t, err)
	assert.NotContains(t, string(e.Value()), secret[4:])
	var fields map[string]any
	require.NoError(t, json.Unmarshal(e.Value(), &fields))
	assert.ElementsMatch(t, []string{"id", "tenant", "created_at", "label"}, keysOf(fields))

	second, tok2, err := s.tokens.Issue(ctx, "alpha", "")
	require.NoError(t, err)
	assert.NotEqual(t, secret, second)
	betaSecret, betaTok, err := s.tokens.Issue(ctx, "beta", "laptop")
	require.NoError(t, err)
	list, err := s.tokens.List(ctx, "alpha")
	require.NoError(t, err)
	require.Len(t, list, 2, "beta's token is not alpha's")
	assert.Equal(t, []string{tok.ID, tok2.ID}, []string{list[0].ID, list[1].ID}, "oldest first")

	require.NoError(t, s.tokens.Revoke(ctx, "alpha", tok.ID))
	_, err = s.tokens.Verify(ctx, secret)
	require.ErrorIs(t, err, tenant.ErrBadToken, "a revoked token")
	assert.ErrorIs(t, s.tokens.Revoke(ctx, "alpha", tok.ID), tenant.ErrNoToken)
	assert.ErrorIs(t, s.tokens.Revoke(ctx, "alpha", betaTok.ID), tenant.ErrNoToken, "alpha cannot revoke beta's token")
	_, err = s.tokens.Verify(ctx, second)
	require.NoError(t, err, "the other token of alpha still works")

	n, err := s.tokens.RevokeTenant(ctx, "alpha")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = s.tokens.Verify(ctx, second)
	assert.ErrorIs(t, err, tenant.ErrBadToken)
	_, err = s.tokens.Verify(ctx, betaSecret)
	require.NoError(t, err, "beta is untouched")
	list, err = s.tokens.List(ctx, "alpha")
	require.NoError(t, err)
	assert.Empty(t, list)
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestTokenOfARemovedTenantIsRefused(t *testing.T) {
	t.Parallel()
	s := newTokenSetup(t)
	ctx := context.Background()
	secret, _, err := s.tokens.Issue(ctx, "alpha", "")
	require.NoError(t, err)
	require.NoError(t, s.reg.Delete(ctx, "alpha"))
	_, err = s.tokens.Verify(ctx, secret)
	require.ErrorIs(t, err, tenant.ErrBadToken)
	assert.Contains(t, err.Error(), "tenant alpha was removed")

	require.NoError(t, s.reg.Create(ctx, tenant.Tenant{Name: "alpha"}))
	_, err = s.tokens.Verify(ctx, secret)
	assert.NoError(t, err, "the token acts again for a tenant of the same name: RevokeTenant on `tenant rm`")
}

func TestIssueChecksItsInput(t *testing.T) {
	t.Parallel()
	s := newTokenSetup(t)
	ctx := context.Background()
	_, _, err := s.tokens.Issue(ctx, "gamma", "")
	assert.ErrorIs(t, err, tenant.ErrNotFound, "no such tenant")
	_, _, err = s.tokens.Issue(ctx, "a.>", "")
	assert.ErrorIs(t, err, job.ErrInvalidTenant)
	for _, label := range []string{strings.Repeat("x", tenant.MaxTokenLabel+1), "two\nlines", "nul\x00", "bad \xff utf-8"} {
		_, _, err = s.tokens.Issue(ctx, "alpha", label)
		assert.ErrorIs(t, err, tenant.ErrInvalid, "%q", label)
	}
	_, _, err = s.tokens.Issue(ctx, "alpha", "Émile's laptop")
	assert.NoError(t, err)
	_, err = s.tokens.List(ctx, "a.>")
	assert.ErrorIs(t, err, job.ErrInvalidTenant)
}

func TestVerifyRefusesWhatIsNoToken(t *testing.T) {
	t.Parallel()
	s := newTokenSetup(t)
	ctx := context.Background()
	secret, _, err := s.tokens.Issue(ctx, "alpha", "")
	require.NoError(t, err)
	body := secret[len(tenant.TokenPrefix):]
	for _, bad := range badSecrets(secret) {
		_, err := s.tokens.Verify(ctx, bad)
		assert.ErrorIs(t, err, tenant.ErrBadToken, "%q", bad)
		assert.NotContains(t, err.Error(), body, "an error never shows a secret")
	}
}

// badSecrets are strings near secret that Verify must refuse.
func badSecrets(secret string) []string {
	body := secret[len(tenant.TokenPrefix):]
	other := []byte(body)
	other[0] = map[bool]byte{true: 'b', false: 'a'}[other[0] == 'a']
	return []string{
		"", "pdk_", "pdk", body, "Bearer " + secret, secret + "\n", " " + secret, strings.ToUpper(secret),
		"PDK_" + body, secret[:len(secret)-1], secret + "a", tenant.TokenPrefix + string(other),
		tenant.TokenPrefix + strings.Repeat("1", 52), tenant.TokenPrefix + strings.Repeat("a", 52),
		tenant.TokenPrefix + strings.Repeat("a", 51) + "=",
	}
}

// FuzzVerify: whatever a client sends as a bearer token, Verify refuses it
// with ErrBadToken (never another error, never a token) unless it is a
// secret that was issued.
func FuzzVerify(f *testing.F) {
	f.Add("pdk_" + strings.Repeat("a", 52))
	f.Add("pdk_\x00")
	for _, s := range badSecrets("pdk_" + strings.Repeat("q", 52)) {
		f.Add(s)
	}
	ts := fuzzTokens(f)
	ctx := context.Background()
	issued, _, err := ts.Issue(ctx, "alpha", "")
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, secret string) {
		if secret == issued {
			return
		}
		_, err := ts.Verify(ctx, secret)
		require.ErrorIs(t, err, tenant.ErrBadToken, "%q", secret)
	})
}

// fuzzTokens is a server with tenant alpha and the tokens bucket, for a
// fuzz target or a benchmark (the server lives as long as f).
func fuzzTokens(f testing.TB) *tenant.Tokens {
	a, err := tenant.NewAuthority()
	require.NoError(f, err)
	dir := f.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"), NoLog: true, NoSigs: true}
	require.NoError(f, a.ConfigureServer(opts, filepath.Join(dir, "accounts")))
	srv, err := server.NewServer(opts)
	require.NoError(f, err)
	go srv.Start()
	f.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	require.True(f, srv.ReadyForConnections(10*time.Second), "nats server not ready")
	creds, _, err := a.IssueUser(tenant.RoleAdmin, "", "")
	require.NoError(f, err)
	path := filepath.Join(dir, "admin.creds")
	require.NoError(f, tenant.WriteCreds(path, creds))
	nc, err := nats.Connect(srv.ClientURL(), nats.UserCredentials(path))
	require.NoError(f, err)
	f.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(f, err)
	ctx := context.Background()
	reg, err := tenant.NewRegistry(ctx, js)
	require.NoError(f, err)
	require.NoError(f, reg.Create(ctx, tenant.Tenant{Name: "alpha"}))
	ts, err := tenant.NewTokens(ctx, js, reg)
	require.NoError(f, err)
	return ts
}

// BenchmarkVerify is the cost of one bearer token check on a local server:
// two direct gets (the token, then its tenant).
func BenchmarkVerify(b *testing.B) {
	ts := fuzzTokens(b)
	ctx := context.Background()
	secret, _, err := ts.Issue(ctx, "alpha", "")
	require.NoError(b, err)
	for b.Loop() {
		if _, err := ts.Verify(ctx, secret); err != nil {
			b.Fatal(err)
		}
	}
}

// The gateway's service user reads tokens and tenants by key, keeps its
// sessions, and reaches nothing of any tenant.
func TestGatewayServiceUser(t *testing.T) {
	t.Parallel()
	s := newTokenSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tenantStreams(t, s.adminJS)
	secret, _, err := s.tokens.Issue(ctx, "alpha", "")
	require.NoError(t, err)
	revoked, revokedTok, err := s.tokens.Issue(ctx, "beta", "")
	require.NoError(t, err)
	require.NoError(t, s.tokens.Revoke(ctx, "beta", revokedTok.ID))
	path, _ := s.issue(t, tenant.RoleGateway, "")
	gw := mustDial(t, s.url, path, nats.CustomInboxPrefix(tenant.GatewayInboxPrefix))
	gjs, err := jetstream.New(gw.Conn)
	require.NoError(t, err)

	reg, err := tenant.NewRegistry(ctx, gjs)
	require.NoError(t, err, "the gateway binds the registry")
	ts, err := tenant.NewTokens(ctx, gjs, reg)
	require.NoError(t, err, "and the tokens")
	tok, err := ts.Verify(ctx, secret)
	require.NoError(t, err, "Verify needs only reads")
	assert.Equal(t, "alpha", tok.Tenant)
	_, err = ts.Verify(ctx, revoked)
	assert.ErrorIs(t, err, tenant.ErrBadToken)

	// It may not write tokens or tenants, nor list them.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, _, err = ts.Issue(short, "alpha", "")
	assert.Error(t, err)
	gw.waitErr(t, `Publish to "$KV.paddock_tokens.`)
	short, cancelShort = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, err = ts.List(short, "alpha")
	assert.Error(t, err)
	gw.waitErr(t, `Publish to "$JS.API.CONSUMER.CREATE.KV_paddock_tokens`)

	gatewaySessions(t, ctx, gjs)
	for p, want := range map[probe]bool{
		{false, "$KV." + tenant.RegistryBucket + ".alpha"}:                                      false,
		{false, "$JS.API.STREAM.DELETE.KV_" + tenant.TokensBucket}:                              false,
		{false, "$JS.API.STREAM.PURGE.KV_" + tenant.TokensBucket}:                               false,
		{false, "$JS.API.STREAM.DELETE.KV_" + tenant.SessionsBucket}:                            false,
		{false, "$JS.API.CONSUMER.CREATE.KV_" + tenant.RegistryBucket}:                          false,
		{false, job.SubmitSubject("alpha")}:                                                     false,
		{false, job.CancelRequestSubject("alpha")}:                                              false,
		{false, "$JS.API.DIRECT.GET.PADDOCK_RESULTS_alpha." + job.ResultSubject("alpha", "j1")}: false,
		{false, "$JS.API.STREAM.INFO." + job.OutputStream("alpha")}:                             false,
		{false, "$JS.API.CONSUMER.CREATE." + job.JobsStream("alpha")}:                           false,
		{false, "$O." + job.InBucket("alpha") + ".C.x"}:                                         false,
		{false, "$JS.API.STREAM.CREATE.KV_other"}:                                               false,
		{true, job.ResultSubjects("alpha")}:                                                     false,
		{true, job.OutputSubjects("alpha")}:                                                     false,
		{true, job.InboxPrefix("alpha") + ".>"}:                                                 false,
		{true, "_INBOX.>"}:                                                                      false,
		{true, ">"}:                                                                             false,
		{true, tenant.GatewayInboxPrefix + ".x"}:                                                true,
		{false, "$JS.API.STREAM.INFO.KV_" + tenant.TokensBucket}:                                true,
	} {
		assert.Equal(t, want, allowed(t, gw, p), "%s", p)
	}
}

// gatewaySessions uses the sessions bucket the way package gateway does.
func gatewaySessions(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: tenant.SessionsBucket, History: 1})
	require.NoError(t, err, "the gateway creates its sessions bucket")
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: tenant.SessionsBucket, History: 1,
		Description: "sessions"})
	require.NoError(t, err, "and updates it")
	_, err = js.KeyValue(ctx, tenant.SessionsBucket)
	require.NoError(t, err)
	rev, err := kv.Create(ctx, "alpha.s1", []byte("v1"))
	require.NoError(t, err)
	_, err = kv.Update(ctx, "alpha.s1", []byte("v2"), rev)
	require.NoError(t, err, "a revision-checked update")
	_, err = kv.Update(ctx, "alpha.s1", []byte("v3"), rev)
	assert.ErrorIs(t, err, jetstream.ErrKeyExists, "a stale revision is refused")
	_, err = kv.Put(ctx, "beta.s2", []byte("w"))
	require.NoError(t, err)
	e, err := kv.Get(ctx, "alpha.s1")
	require.NoError(t, err)
	assert.Equal(t, "v2", string(e.Value()))
	keys, err := kv.ListKeys(ctx)
	require.NoError(t, err)
	var all []string
	for k := range keys.Keys() {
		all = append(all, k)
	}
	assert.ElementsMatch(t, []string{"alpha.s1", "beta.s2"}, all)
	w, err := kv.Watch(ctx, "alpha.>")
	require.NoError(t, err)
	defer w.Stop()
	first := <-w.Updates()
	require.NotNil(t, first)
	assert.Equal(t, "alpha.s1", first.Key())
	require.NoError(t, kv.Delete(ctx, "alpha.s1"))
	_, err = kv.Get(ctx, "alpha.s1")
	assert.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	require.NoError(t, kv.Purge(ctx, "beta.s2"))
	_, err = kv.Status(ctx)
	require.NoError(t, err)
}
