package tenant

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/paddockhq/paddock/job"
)

// GatewayKeyRole is the Role of the gateway's scoped signing key in the
// PADDOCK account JWT (jwt.UserScope.Role): EnsureGatewayKey finds its
// key by it, and removes the other keys of that role (a replaced key).
const GatewayKeyRole = "paddock-gateway"

// tenantTemplate is what the gateway key's permission template holds
// where a tenant's grant names the tenant: the server puts there the
// value of the user's "paddock-tenant:" tag.
var tenantTemplate = "{{tag(" + strings.TrimSuffix(TagTenantPrefix, ":") + ")}}"

// templateTenant is the tenant whose grant becomes the template: a valid
// tenant name that no other part of a subject spells.
const templateTenant = "t-e-m-p-l-a-t-e-0"

// Bounds of a minted user's lifetime.
const (
	MinMintTTL = time.Second
	MaxMintTTL = 24 * time.Hour
)

// ErrMint is wrapped by the errors of NewMinter, Creds and Option about a
// bad argument.
var ErrMint = errors.New("tenant: cannot mint")

// gatewayScope is the scope of the gateway key pub: a user it signs gets
// exactly the grant of the tenant in its "paddock-tenant:" tag (tenantGrant,
// with that tenant's name put in by the server), and a user without that
// tag gets nothing (the server drops a subject whose tag is missing, and
// denies everything when none is left).
func gatewayScope(pub string) (*jwt.UserScope, error) {
	g := tenantGrant(templateTenant)
	s := jwt.NewUserScope()
	s.Key, s.Role = pub, GatewayKeyRole
	s.Description = "Paddock gateway: a tenant's own permissions, for the tenant in the user's paddock-tenant tag"
	for _, l := range []struct {
		from []string
		to   *jwt.StringList
	}{{g.Pub, &s.Template.Pub.Allow}, {g.Sub, &s.Template.Sub.Allow}} {
		for _, subj := range l.from {
			if !strings.Contains(subj, templateTenant) {
				// It would be granted to every user of the key, whatever its tag.
				return nil, fmt.Errorf("tenant: the tenant grant's subject %q names no tenant: it cannot be in the gateway key's template", subj)
			}
			l.to.Add(strings.ReplaceAll(subj, templateTenant, tenantTemplate))
		}
	}
	return s, nil
}

// Minter makes the NATS users through which the gateway acts as a tenant.
// It holds the gateway's scoped signing key (Authority.EnsureGatewayKey),
// never the account's: a user it signs carries no permissions of its own,
// and the server gives it those of the key's template, the grant of the
// tenant named in its tag. The key can thus act as any tenant, and as
// nothing else. It is safe for concurrent use.
type Minter struct {
	account string
	key     nkeys.KeyPair
	ttl     time.Duration
}

// MinterConfig configures a Minter; a zero field takes its default.
type MinterConfig struct {
	// TTL is the lifetime of the users Option mints (default 1 h, between
	// MinMintTTL and MaxMintTTL). The server disconnects a user when its
	// JWT expires; Option's connection then reconnects with a new one.
	TTL time.Duration
}

// NewMinter returns a Minter signing with the gateway key's seed for the
// account whose public key is account (Authority.AccountKey; the
// gateway's own service user names it too: UserOfCreds(…).Account).
func NewMinter(account string, seed []byte, cfg MinterConfig) (*Minter, error) {
	if !nkeys.IsValidPublicAccountKey(account) {
		return nil, fmt.Errorf("%w: %q is not the public key of an account (\"A…\")", ErrMint, account)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: gateway key: %w", ErrMint, err)
	}
	if pub, _ := kp.PublicKey(); !nkeys.IsValidPublicAccountKey(pub) || pub == account {
		return nil, fmt.Errorf("%w: the gateway key must be an account signing key (a seed \"SA…\") other than the account's own", ErrMint)
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Hour
	}
	if cfg.TTL < MinMintTTL || cfg.TTL > MaxMintTTL {
		return nil, fmt.Errorf("%w: TTL %s: use %s to %s", ErrMint, cfg.TTL, MinMintTTL, MaxMintTTL)
	}
	return &Minter{account: account, key: kp, ttl: cfg.TTL}, nil
}

// LoadMinter is NewMinter with the seed in the file at path (the
// authority's gateway.nk), which only its owner may read.
func LoadMinter(account, path string, cfg MinterConfig) (*Minter, error) {
	kp, err := readSeed(path)
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMint, path, err)
	}
	return NewMinter(account, seed, cfg)
}

// Key is the public key of the Minter's signing key.
func (m *Minter) Key() string { return publicKey(m.key) }

// Creds mints a new user of tenantName valid for ttl: its JWT (tags
// paddock-role:tenant and paddock-tenant:<tenant>, no permissions of its
// own, issued for the PADDOCK account) and its key pair, which signs the
// server's nonce. Connect with nats.UserJWT, or Option.
func (m *Minter) Creds(tenantName string, ttl time.Duration) (string, nkeys.KeyPair, error) {
	if err := job.CheckTenant(tenantName); err != nil {
		// The name goes into subjects: a wildcard would reach other tenants.
		return "", nil, fmt.Errorf("%w: %w", ErrMint, err)
	}
	if ttl < MinMintTTL || ttl > MaxMintTTL {
		return "", nil, fmt.Errorf("%w: ttl %s: use %s to %s", ErrMint, ttl, MinMintTTL, MaxMintTTL)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, fmt.Errorf("tenant: user key: %w", err)
	}
	uc := jwt.NewUserClaims(publicKey(kp))
	uc.Name = "gateway:" + tenantName
	uc.IssuerAccount = m.account
	uc.SetScoped(true) // the key's template decides; the server refuses a scoped user with its own
	uc.Tags.Add(TagRolePrefix+string(RoleTenant), TagTenantPrefix+tenantName)
	exp := time.Now().Add(ttl)
	uc.Expires = exp.Unix()
	if exp.Nanosecond() != 0 { // whole seconds: never shorter than ttl
		uc.Expires++
	}
	token, err := uc.Encode(m.key)
	if err != nil {
		return "", nil, fmt.Errorf("tenant: sign the gateway's user of %s: %w", tenantName, err)
	}
	return token, kp, nil
}

// Option connects as tenantName with a user minted on every connect and
// reconnect (so an expired JWT never strands the connection: the server
// closes it at expiry, and the reconnect brings a new one), and with the
// tenant's inbox prefix (job.InboxPrefix). A bad tenant name fails the
// connect with an error wrapping ErrMint. Each connection the Option is
// given to mints its own users.
func (m *Minter) Option(tenantName string) nats.Option {
	return func(o *nats.Options) error {
		if err := job.CheckTenant(tenantName); err != nil {
			return fmt.Errorf("%w: %w", ErrMint, err)
		}
		if err := nats.UserJWT(m.callbacks(tenantName))(o); err != nil {
			return err
		}
		return nats.CustomInboxPrefix(job.InboxPrefix(tenantName))(o)
	}
}

// callbacks are the nats.UserJWT callbacks of one connection: the first
// mints a user, the second signs the server's nonce with the key of the
// user minted last (nats.go calls them in turn for each connect).
func (m *Minter) callbacks(tenantName string) (nats.UserJWTHandler, nats.SignatureHandler) {
	var (
		mu sync.Mutex
		kp nkeys.KeyPair
	)
	userJWT := func() (string, error) {
		token, k, err := m.Creds(tenantName, m.ttl)
		if err != nil {
			return "", err
		}
		mu.Lock()
		kp = k
		mu.Unlock()
		return token, nil
	}
	sign := func(nonce []byte) ([]byte, error) {
		mu.Lock()
		k := kp
		mu.Unlock()
		if k == nil {
			return nil, fmt.Errorf("%w: no user minted before the server's nonce", ErrMint)
		}
		return k.Sign(nonce)
	}
	return userJWT, sign
}

// EnsureGatewayKey gives the authority the gateway's scoped signing key,
// whose users get a tenant's permissions and nothing else (gatewayScope),
// creating the key when the authority has none (one saved before this
// version), and puts it in the PADDOCK account JWT with the current
// template (which follows tenantGrant: an upgrade that changed the grant
// changes the template). It also removes any other key of GatewayKeyRole
// from the account (delete gateway.nk and call it again to replace a
// leaked key: the servers then close the old key's connections).
//
// changed reports that the account JWT was re-signed. The caller must
// then Save the authority (gateway.nk and account.jwt) and get the new
// account JWT to the servers: PushAccount to a running server, or its
// preload (ConfigureServer, ServerConfig) when it starts. Until a server
// has it, the server refuses the users the key signs.
func (a *Authority) EnsureGatewayKey() (changed bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	gw := a.gateway
	if gw == nil {
		if gw, err = nkeys.CreateAccount(); err != nil {
			return false, fmt.Errorf("tenant: gateway key: %w", err)
		}
	}
	pub := publicKey(gw)
	scope, err := gatewayScope(pub)
	if err != nil {
		return false, err
	}
	keys := jwt.SigningKeys{}
	for k, s := range a.accClaims.SigningKeys {
		if us, ok := s.(*jwt.UserScope); k != pub && (!ok || us.Role != GatewayKeyRole) {
			keys[k] = s
		}
	}
	keys.AddScopedSigner(scope)
	if sameKeys(keys, a.accClaims.SigningKeys) {
		a.gateway = gw
		return false, nil
	}
	c := *a.accClaims
	c.SigningKeys = keys
	token, err := c.Encode(a.operator)
	if err != nil {
		return false, fmt.Errorf("tenant: re-sign account JWT with the gateway key: %w", err)
	}
	a.accClaims, a.accountJWT, a.gateway = &c, token, gw
	return true, nil
}

// sameKeys compares signing keys as the account JWT encodes them (sorted
// by key), so that a field the encoding drops cannot make a re-sign look
// needed at every start.
func sameKeys(a, b jwt.SigningKeys) bool {
	ja, erra := json.Marshal(&a)
	jb, errb := json.Marshal(&b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}

// GatewayKey is the public key of the gateway's signing key, empty until
// EnsureGatewayKey.
func (a *Authority) GatewayKey() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gateway == nil {
		return ""
	}
	return publicKey(a.gateway)
}

// GatewaySeed is the seed of the gateway's signing key, for NewMinter (a
// gateway that runs apart reads gateway.nk instead: LoadMinter). It fails
// until EnsureGatewayKey.
func (a *Authority) GatewaySeed() ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gateway == nil {
		return nil, fmt.Errorf("%w: no gateway key: call EnsureGatewayKey (then Save and push the account)", ErrAuthority)
	}
	seed, err := a.gateway.Seed()
	if err != nil {
		return nil, fmt.Errorf("tenant: gateway seed: %w", err)
	}
	return seed, nil
}
