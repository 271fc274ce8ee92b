package tenant

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/paddockhq/paddock/job"
)

// Each tenant has a NATS account of its own (the tenant account), signed
// by the operator like PADDOCK. Every stream, bucket and service of the
// fleet stays in PADDOCK; a tenant account has no JetStream and reaches
// PADDOCK only through the imports its JWT lists (tenantImports), each
// naming that tenant's own subjects. Only the operator signs an account
// JWT, so a tenant cannot add an import.
//
// Why accounts and not subject permissions in one account: some NATS APIs
// make the server publish for a client on a subject the client names (a
// push consumer's deliver subject, the reply subject of any request). The
// server does not check that subject against the client's permissions, so
// inside one account a tenant could make the server, or a service
// answering it, store messages in another tenant's stream. Across
// accounts, whatever the server publishes for a tenant is published in the
// tenant's account, where the only subjects that lead anywhere are its
// own imports, and a request's reply subject is rewritten by the service
// import (a "_R_." subject in PADDOCK that routes back to the requester's
// account only).

// TenantAccountPrefix + tenant is the name of a tenant's account.
const TenantAccountPrefix = "tenant:"

// tenantAccountDomain separates the derivation of tenant account keys from
// any other use of the PADDOCK account's seed.
const tenantAccountDomain = "paddock/tenant-account/v1\x00"

// tenantAccountKey derives tenant's account key pair from the PADDOCK
// account's seed: the same tenant always has the same account (a server
// that stored its JWT, a user that names it), and the authority keeps no
// seed per tenant. Only the holder of account.nk can derive it.
func (a *Authority) tenantAccountKey(name string) (nkeys.KeyPair, error) {
	seed, err := a.account.Seed()
	if err != nil {
		return nil, fmt.Errorf("tenant: account seed: %w", err)
	}
	mac := hmac.New(sha256.New, seed)
	mac.Write([]byte(tenantAccountDomain + name))
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteAccount, mac.Sum(nil))
	if err != nil {
		return nil, fmt.Errorf("tenant: account key of %s: %w", name, err)
	}
	return kp, nil
}

// TenantAccountKey is the public key of tenant's account ("A…"), whether
// or not its JWT exists yet.
func (a *Authority) TenantAccountKey(name string) (string, error) {
	if err := job.CheckTenant(name); err != nil {
		return "", fmt.Errorf("%w: %w", ErrRole, err)
	}
	kp, err := a.tenantAccountKey(name)
	if err != nil {
		return "", err
	}
	return publicKey(kp), nil
}

// paddockExports is what PADDOCK exports: every subject a tenant account
// may import, for any tenant (the imports pin the tenant). They are
// public: any account may import them, and only the operator signs
// accounts, so an import exists only where this package put it.
func paddockExports() jwt.Exports {
	services := []string{
		job.SubjectSubmitPrefix + "*",
		job.SubjectCancelRequestPrefix + "*",
		job.SubjectJobsRequestPrefix + "*",
		"$JS.API.DIRECT.GET.>",
		"$JS.API.STREAM.INFO.*",
		"$JS.API.STREAM.PURGE.*",
		"$O.>",
	}
	var ex jwt.Exports
	for _, s := range services {
		ex = append(ex, &jwt.Export{Name: s, Subject: jwt.Subject(s), Type: jwt.Service})
	}
	for _, s := range []string{job.SubjectResultPrefix + ">", job.SubjectOutputPrefix + ">"} {
		ex = append(ex, &jwt.Export{Name: s, Subject: jwt.Subject(s), Type: jwt.Stream})
	}
	return ex
}

// tenantImports is what tenant t's account imports from PADDOCK (account
// key paddock): exactly the subjects of tenantGrant, each of them t's own.
// Services are requests (submit, cancel, list, JetStream direct gets and
// infos of t's streams, uploads into t's input bucket and its purge);
// streams are messages t receives (its results and live output).
//
// No import reaches a JetStream API that makes the server publish on a
// subject of the caller's choosing (consumer or stream create): t reads
// its streams and buckets with direct gets only.
func tenantImports(t, paddock string) jwt.Imports {
	var im jwt.Imports
	for _, s := range tenantRequests(t) {
		i := &jwt.Import{Name: s, Subject: jwt.Subject(s), Account: paddock, Type: jwt.Service}
		if local, ok := localAPISubject(s); ok {
			i.LocalSubject = jwt.RenamingSubject(local)
		}
		im = append(im, i)
	}
	for _, s := range []string{job.ResultSubjects(t), job.OutputSubjects(t)} {
		im = append(im, &jwt.Import{Name: s, Subject: jwt.Subject(s), Account: paddock, Type: jwt.Stream})
	}
	return im
}

// jsAPIPrefix starts every JetStream API subject.
const jsAPIPrefix = "$JS.API."

// LocalAPIPrefix is where a tenant account imports PADDOCK's JetStream API
// subjects. The server answers "$JS.API.>" in every account itself (with
// "JetStream not enabled" in a tenant's), so an import under the same name
// would race that answer. The account maps each API subject its tenant
// may use to this prefix (tenantMappings) after the user's permissions
// were checked, and imports it from there: the tenant's clients keep
// using the usual "$JS.API." subjects.
const LocalAPIPrefix = "paddock.jsapi."

// localAPISubject is where a tenant account imports the JetStream API
// subject s; false when s is not one.
func localAPISubject(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, jsAPIPrefix)
	if !ok {
		return "", false
	}
	return LocalAPIPrefix + rest, true
}

// tenantMappings map tenant t's JetStream API subjects to their imports.
func tenantMappings(t string) jwt.Mapping {
	m := jwt.Mapping{}
	for _, s := range tenantRequests(t) {
		if local, ok := localAPISubject(s); ok {
			m[jwt.Subject(s)] = []jwt.WeightedMapping{{Subject: jwt.Subject(local)}}
		}
	}
	return m
}

// tenantAccountClaims are the claims tenant t's account should have:
// t's imports, no JetStream, the gateway key (gw, when not empty) as a
// signing key scoped to t's grant, and the revocations rev.
func (a *Authority) tenantAccountClaims(t string, gw string, rev jwt.RevocationList) (*jwt.AccountClaims, error) {
	pub, err := a.TenantAccountKey(t)
	if err != nil {
		return nil, err
	}
	c := jwt.NewAccountClaims(pub)
	c.Name = TenantAccountPrefix + t
	c.Tags.Add(TagTenantPrefix + t)
	c.Imports = tenantImports(t, publicKey(a.account))
	c.Mappings = tenantMappings(t)
	// JetStream off (zero storage): the tenant's data is in PADDOCK.
	c.Limits.JetStreamLimits = jwt.JetStreamLimits{}
	c.Limits.AccountLimits = tenantAccountLimits
	c.Limits.NatsLimits = tenantNatsLimits
	if gw != "" {
		c.SigningKeys.AddScopedSigner(tenantScope(gw, t))
	}
	if len(rev) > 0 {
		c.Revocations = jwt.RevocationList{}
		for k, v := range rev {
			c.Revocations[k] = v
		}
	}
	return c, nil
}

// What one tenant's account may hold on a server, so that no tenant can use
// up a server's connections or subscriptions for the others: the server
// refuses the connection or subscription past them ("maximum account
// active connections exceeded"). A bearer JWT (one that skips the nonce
// signature) is refused.
var (
	tenantAccountLimits = jwt.AccountLimits{Imports: jwt.NoLimit, Exports: 0, Conn: TenantMaxConnections,
		LeafNodeConn: 0, DisallowBearer: true}
	tenantNatsLimits = jwt.NatsLimits{Subs: TenantMaxSubscriptions, Data: jwt.NoLimit, Payload: TenantMaxPayload}
)

// The limits of a tenant's account.
const (
	// TenantMaxConnections bounds a tenant's connections at once (its
	// pipelines', and one per gateway that acts for it).
	TenantMaxConnections = 256
	// TenantMaxSubscriptions bounds a tenant's subscriptions at once (a
	// Wait or Follow holds one or two).
	TenantMaxSubscriptions = 16384
	// TenantMaxPayload bounds one message a tenant publishes: above the
	// largest spec (job.MaxSpecBytes) and an upload chunk (128 KiB).
	TenantMaxPayload = 1 << 20
)

// tenantScope is the gateway key's scope in tenant t's account: a user it
// signs gets exactly t's grant.
func tenantScope(gw, t string) *jwt.UserScope {
	g := tenantGrant(t)
	s := jwt.NewUserScope()
	s.Key, s.Role = gw, GatewayKeyRole
	s.Description = "Paddock gateway: acts as tenant " + t + " with its own permissions"
	s.Template.Pub.Allow.Add(g.Pub...)
	s.Template.Sub.Allow.Add(g.Sub...)
	return s
}

// EnsureTenantAccount creates tenant t's account JWT, or re-signs it when
// what this version puts in it (imports, gateway key) changed; revocations
// are kept. changed reports a new JWT: Save the authority and push it
// (PushAccount), or the servers refuse t's new users.
func (a *Authority) EnsureTenantAccount(t string) (changed bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ensureTenantAccount(t)
}

func (a *Authority) ensureTenantAccount(t string) (bool, error) {
	old := a.tenants[t]
	var rev jwt.RevocationList
	if old != nil {
		rev = old.claims.Revocations
	}
	gw := ""
	if a.gateway != nil {
		gw = publicKey(a.gateway)
	}
	want, err := a.tenantAccountClaims(t, gw, rev)
	if err != nil {
		return false, err
	}
	if old != nil && sameTenantAccount(old.claims, want) {
		return false, nil
	}
	token, err := want.Encode(a.operator)
	if err != nil {
		return false, fmt.Errorf("tenant: sign the account of %s: %w", t, err)
	}
	if a.tenants == nil {
		a.tenants = map[string]*tenantAccount{}
	}
	a.tenants[t] = &tenantAccount{claims: want, jwt: token}
	return true, nil
}

// sameTenantAccount compares what EnsureTenantAccount manages.
func sameTenantAccount(have, want *jwt.AccountClaims) bool {
	enc := func(c *jwt.AccountClaims) string {
		im := slices.Clone(c.Imports)
		slices.SortFunc(im, func(x, y *jwt.Import) int { return strings.Compare(string(x.Subject), string(y.Subject)) })
		return fmt.Sprint(c.Name, c.Limits, importsString(im), mappingsString(c.Mappings))
	}
	return sameKeys(have.SigningKeys, want.SigningKeys) && enc(have) == enc(want)
}

// mappingsString is subject mappings in a comparable form.
func mappingsString(m jwt.Mapping) string {
	b, err := json.Marshal(m) // encoding/json sorts map keys
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func importsString(im jwt.Imports) string {
	var b strings.Builder
	for _, i := range im {
		fmt.Fprintf(&b, "%s|%s|%s|%s;", i.Type, i.Account, i.Subject, i.LocalSubject)
	}
	return b.String()
}

// tenantAccount is the current JWT of one tenant account.
type tenantAccount struct {
	claims *jwt.AccountClaims
	jwt    string
}

// TenantAccountJWT is the current JWT of tenant t's account; false when
// EnsureTenantAccount never made one.
func (a *Authority) TenantAccountJWT(t string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ta := a.tenants[t]
	if ta == nil {
		return "", false
	}
	return ta.jwt, true
}

// Tenants lists the tenants that have an account JWT, sorted.
func (a *Authority) Tenants() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	names := make([]string, 0, len(a.tenants))
	for n := range a.tenants {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// RevokeTenantUser revokes user userPub of tenant t's account and re-signs
// it. Push it (PushAccount) and Save the authority.
func (a *Authority) RevokeTenantUser(t, userPub string) error {
	if !nkeys.IsValidPublicUserKey(userPub) && userPub != jwt.All {
		return fmt.Errorf("tenant: revoke %q: not the public key of a user", userPub)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ta := a.tenants[t]
	if ta == nil {
		return fmt.Errorf("%w: tenant %s has no account", ErrNotFound, t)
	}
	c, token, err := a.revoked(ta.claims, userPub)
	if err != nil {
		return fmt.Errorf("tenant: re-sign the account of %s: %w", t, err)
	}
	a.tenants[t] = &tenantAccount{claims: c, jwt: token}
	return nil
}

// RevokeTenant revokes every user of tenant t's account issued until now
// (its credentials and the gateway's users of it): what `paddock tenant
// rm` does. A tenant added again later gets the same account, and users
// issued after the revocation work.
func (a *Authority) RevokeTenant(t string) error { return a.RevokeTenantUser(t, jwt.All) }

// tenantsDir, in the directory of a saved Authority, holds the JWT of each
// tenant account, <tenant>.jwt (their keys derive from account.nk).
const tenantsDir = "tenants"

// saveTenants writes every tenant account JWT into dir/tenants.
func (a *Authority) saveTenants(dir string) error {
	a.mu.Lock()
	jwts := map[string]string{}
	for t, ta := range a.tenants {
		jwts[t] = ta.jwt
	}
	a.mu.Unlock()
	if len(jwts) == 0 {
		return nil
	}
	td := filepath.Join(dir, tenantsDir)
	if err := privateDir(td); err != nil {
		return err
	}
	for t, token := range jwts {
		if err := writePrivate(filepath.Join(td, t+".jwt"), []byte(token+"\n")); err != nil {
			return err
		}
	}
	return nil
}

// loadTenants reads dir/tenants, checking that each JWT is the account the
// authority derives for its tenant, signed by the operator.
func (a *Authority) loadTenants(dir string) error {
	entries, err := os.ReadDir(filepath.Join(dir, tenantsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tenant: load tenant accounts: %w", err)
	}
	a.tenants = map[string]*tenantAccount{}
	for _, e := range entries {
		t, ok := strings.CutSuffix(e.Name(), ".jwt")
		if !ok || job.CheckTenant(t) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, tenantsDir, e.Name()))
		if err != nil {
			return fmt.Errorf("tenant: load tenant accounts: %w", err)
		}
		token := strings.TrimSpace(string(b))
		c, err := jwt.DecodeAccountClaims(token)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrAuthority, e.Name(), err)
		}
		want, err := a.TenantAccountKey(t)
		if err != nil {
			return err
		}
		if c.Subject != want || c.Issuer != publicKey(a.operator) {
			return fmt.Errorf("%w: %s is not the account of tenant %s signed by this operator", ErrAuthority, e.Name(), t)
		}
		a.tenants[t] = &tenantAccount{claims: c, jwt: token}
	}
	return nil
}

// accountJWTs are the public keys and JWTs of every account a server must
// know: SYS, PADDOCK and each tenant's.
func (a *Authority) accountJWTs() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[string]string{publicKey(a.sys): a.sysJWT, publicKey(a.account): a.accountJWT}
	for _, ta := range a.tenants {
		m[ta.claims.Subject] = ta.jwt
	}
	return m
}

// Migrate moves t, a tenant recorded before tenants had accounts, into
// its own account: it creates the account, revokes t's user of PADDOCK
// (t.User, which holds the permissions that let a tenant make the server
// write for it in the shared account), and records the account in t.
// t.User is then empty: the tenant needs new credentials (IssueUser).
// moved is false for a tenant that already has its account. Save the
// authority, push it, then store t.
func (a *Authority) Migrate(t *Tenant) (moved bool, err error) {
	pub, err := a.TenantAccountKey(t.Name)
	if err != nil {
		return false, err
	}
	if _, err := a.EnsureTenantAccount(t.Name); err != nil {
		return false, err
	}
	if t.Account == pub {
		return false, nil
	}
	if t.User != "" {
		if err := a.Revoke(t.User); err != nil {
			return false, err
		}
	}
	t.Account, t.User = pub, ""
	return true, nil
}
