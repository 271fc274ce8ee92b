package tenant

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// Bounds of a minted user's lifetime.
const (
	MinMintTTL = time.Second
	MaxMintTTL = 24 * time.Hour
)

// ErrMint is wrapped by the errors of NewMinter, Creds and Option about a
// bad argument.
var ErrMint = errors.New("tenant: cannot mint")

// Minter makes the NATS users through which the gateway acts as a tenant.
// It holds the gateway's scoped signing key (Authority.EnsureGatewayKey),
// never an account's: a user it signs is a user of the tenant's own
// account, carries no permissions of its own, and the server gives it
// those of the key's scope in that account, the tenant's grant. The key
// can thus act as any tenant, and as nothing else. It is safe for
// concurrent use.
type Minter struct {
	accounts AccountLookup
	key      nkeys.KeyPair
	ttl      time.Duration
}

// AccountLookup returns the public key of a tenant's account (the
// registry keeps it: Tenant.Account; Authority.TenantAccountKey derives
// it).
type AccountLookup func(tenant string) (string, error)

// MinterConfig configures a Minter; a zero field takes its default.
type MinterConfig struct {
	// TTL is the lifetime of the users Option mints (default 1 h, between
	// MinMintTTL and MaxMintTTL). The server disconnects a user when its
	// JWT expires; Option's connection then reconnects with a new one.
	TTL time.Duration
}

// NewMinter returns a Minter signing with the gateway key's seed for the
// tenant accounts that accounts names.
func NewMinter(accounts AccountLookup, seed []byte, cfg MinterConfig) (*Minter, error) {
	if accounts == nil {
		return nil, fmt.Errorf("%w: no account lookup", ErrMint)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: gateway key: %w", ErrMint, err)
	}
	if pub, _ := kp.PublicKey(); !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("%w: the gateway key must be an account signing key (a seed \"SA…\")", ErrMint)
	}
	cfg.TTL = cmp.Or(cfg.TTL, time.Hour)
	if cfg.TTL < MinMintTTL || cfg.TTL > MaxMintTTL {
		return nil, fmt.Errorf("%w: TTL %s: use %s to %s", ErrMint, cfg.TTL, MinMintTTL, MaxMintTTL)
	}
	return &Minter{accounts: accounts, key: kp, ttl: cfg.TTL}, nil
}

// LoadMinter is NewMinter with the seed in the file at path (the
// authority's gateway.nk), which only its owner may read.
func LoadMinter(accounts AccountLookup, path string, cfg MinterConfig) (*Minter, error) {
	kp, err := readSeed(path)
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMint, path, err)
	}
	return NewMinter(accounts, seed, cfg)
}

// Key is the public key of the Minter's signing key.
func (m *Minter) Key() string { return publicKey(m.key) }

// Creds mints a new user of tenantName valid for ttl: its JWT (tags
// paddock-role:tenant and paddock-tenant:<tenant>, no permissions of its
// own, issued for the tenant's account) and its key pair, which signs the
// server's nonce. Connect with nats.UserJWT, or Option.
func (m *Minter) Creds(tenantName string, ttl time.Duration) (string, nkeys.KeyPair, error) {
	if err := job.CheckTenant(tenantName); err != nil {
		// The name goes into subjects: a wildcard would reach other tenants.
		return "", nil, fmt.Errorf("%w: %w", ErrMint, err)
	}
	if ttl < MinMintTTL || ttl > MaxMintTTL {
		return "", nil, fmt.Errorf("%w: ttl %s: use %s to %s", ErrMint, ttl, MinMintTTL, MaxMintTTL)
	}
	account, err := m.accounts(tenantName)
	if err != nil {
		return "", nil, fmt.Errorf("%w: the account of tenant %s: %w", ErrMint, tenantName, err)
	}
	if !nkeys.IsValidPublicAccountKey(account) {
		return "", nil, fmt.Errorf("%w: tenant %s has no account (%q): run `paddock tenant migrate` (or restart `paddock up`)", ErrMint, tenantName, account)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, fmt.Errorf("tenant: user key: %w", err)
	}
	uc := jwt.NewUserClaims(publicKey(kp))
	uc.Name = "gateway:" + tenantName
	uc.IssuerAccount = account
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

// EnsureGatewayKey gives the authority the gateway's signing key,
// creating it when the authority has none (one saved before this version),
// and brings every account JWT to this version: PADDOCK exports what
// tenants import (paddockExports) and holds no gateway key (a gateway key
// of GatewayKeyRole there, from a version whose tenants lived in PADDOCK,
// is removed, so users it signed there stop working), and each tenant
// account has its imports and the gateway key scoped to its grant. Delete
// gateway.nk and call it again to replace a leaked key.
//
// changed reports a new key or a re-signed account JWT. The caller must then
// Save the authority and get the new JWTs to the servers: PushAccount to
// a running server, or its preload (ConfigureServer, ServerConfig) when it
// starts. Until a server has them, it refuses the users the key signs.
func (a *Authority) EnsureGatewayKey() (changed bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gateway == nil {
		gw, err := nkeys.CreateAccount()
		if err != nil {
			return false, fmt.Errorf("tenant: gateway key: %w", err)
		}
		a.gateway, changed = gw, true
	}
	c, err := a.ensurePaddockAccount()
	if err != nil {
		return false, err
	}
	changed = changed || c
	for t := range a.tenants {
		c, err := a.ensureTenantAccount(t)
		if err != nil {
			return false, err
		}
		changed = changed || c
	}
	return changed, nil
}

// ensurePaddockAccount re-signs PADDOCK with paddockExports and without a
// gateway key, when it differs.
func (a *Authority) ensurePaddockAccount() (bool, error) {
	keys := jwt.SigningKeys{}
	for k, s := range a.accClaims.SigningKeys {
		if us, ok := s.(*jwt.UserScope); !ok || us.Role != GatewayKeyRole {
			keys[k] = s
		}
	}
	ex := paddockExports()
	if sameKeys(keys, a.accClaims.SigningKeys) && exportsString(ex) == exportsString(a.accClaims.Exports) {
		return false, nil
	}
	c := *a.accClaims
	c.SigningKeys, c.Exports = keys, ex
	token, err := c.Encode(a.operator)
	if err != nil {
		return false, fmt.Errorf("tenant: re-sign account JWT with its exports: %w", err)
	}
	a.accClaims, a.accountJWT = &c, token
	return true, nil
}

// exportsString is exports in a comparable form.
func exportsString(ex jwt.Exports) string {
	var parts []string
	for _, e := range ex {
		parts = append(parts, fmt.Sprintf("%s|%s|%v", e.Type, e.Subject, e.TokenReq))
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
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
