package tenant

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrAdminConfig is wrapped when an Admin lacks what an operation
	// needs (AdminConfig.AuthDir).
	ErrAdminConfig = errors.New("tenant: bad admin config")
	// ErrNoSystemCreds is wrapped when the system account's credentials
	// (SystemCredsFile) are missing, so an account cannot be pushed.
	ErrNoSystemCreds = errors.New("tenant: no system account credentials")
)

// SystemCredsFile is the credentials file of the system account's user in
// authDir, the layout of `paddock up` and `paddock auth init`
// (IssueSystemUser): PushAccountWith connects with it.
func SystemCredsFile(authDir string) string { return filepath.Join(authDir, "creds", "sys.creds") }

// Dialer connects to the NATS servers with the credentials file creds.
type Dialer func(ctx context.Context, creds string) (*nats.Conn, error)

// PushAccountWith pushes a's account JWTs (PushAccount) over a connection
// dial opens as the system account's user of authDir (SystemCredsFile).
// Without that file it fails wrapping ErrNoSystemCreds: push the accounts
// yourself (nsc push) for a revocation to take effect.
func (a *Authority) PushAccountWith(ctx context.Context, dial Dialer, authDir string) error {
	sys := SystemCredsFile(authDir)
	if _, err := os.Stat(sys); err != nil {
		return fmt.Errorf("%w in %s: push the account yourself (nsc push) for the revocation to take effect", ErrNoSystemCreds, sys)
	}
	nc, err := dial(ctx, sys)
	if err != nil {
		return err
	}
	defer nc.Close()
	return a.PushAccount(ctx, nc)
}

// AdminConfig configures an Admin. The zero value serves the operations
// that only read or write records (List, Set, Tokens).
type AdminConfig struct {
	// AuthDir holds the signing keys (LoadAuthority, Save) and the system
	// account's credentials (SystemCredsFile); Add, Remove, Reissue and
	// Migrate need it (ErrAdminConfig).
	AuthDir string
	// Authority is AuthDir's authority when the caller keeps it in memory
	// (paddock up's, which its servers trust); each change saves it to
	// AuthDir. Nil: each change loads it afresh, as another process may
	// have revoked users since.
	Authority *Authority
	// Streams creates or updates a tenant's streams and buckets to its
	// quotas (results.EnsureTenant), before Add and Set write its record:
	// the schedulers that react to the record find them made, and no two
	// processes update them at once. Nil: the schedulers make them.
	Streams func(ctx context.Context, t Tenant) error
	// Dial connects as the system account's user to push accounts. Nil: a
	// plain connection to the server of the Admin's JetStream (no TLS
	// options of its own).
	Dial Dialer
}

// Admin is tenant administration (`paddock tenant`) for any Go program
// connected as an admin user (RoleAdmin): it keeps a tenant's record
// (Registry), its account and users (Authority, saved in AuthDir and
// pushed to the servers before a new user is handed out) and its streams
// (AdminConfig.Streams) in step. It is safe for sequential use; two
// Admins changing the same AuthDir at once can lose each other's change.
type Admin struct {
	js  jetstream.JetStream
	reg *Registry
	cfg AdminConfig
}

// NewAdmin binds the registry of js (creating its bucket when missing).
func NewAdmin(ctx context.Context, js jetstream.JetStream, cfg AdminConfig) (*Admin, error) {
	reg, err := NewRegistry(ctx, js)
	if err != nil {
		return nil, err
	}
	if cfg.Dial == nil {
		cfg.Dial = dialLike(js.Conn())
	}
	return &Admin{js: js, reg: reg, cfg: cfg}, nil
}

// dialLike is the default Dialer: nc's server, with the credentials.
func dialLike(nc *nats.Conn) Dialer {
	return func(_ context.Context, creds string) (*nats.Conn, error) {
		return nats.Connect(nc.ConnectedUrl(), nats.UserCredentials(creds), nats.Name("paddock-tenant-admin"))
	}
}

// Registry is the registry the Admin keeps.
func (ad *Admin) Registry() *Registry { return ad.reg }

// Tokens is the gateway's token store, creating its bucket when missing.
func (ad *Admin) Tokens(ctx context.Context) (*Tokens, error) { return NewTokens(ctx, ad.js, ad.reg) }

// List returns every tenant, by name.
func (ad *Admin) List(ctx context.Context) ([]Tenant, error) { return ad.reg.List(ctx) }

// authority is the authority to change: AdminConfig.Authority, or
// AuthDir's as it is on disk now.
func (ad *Admin) authority() (*Authority, error) {
	if ad.cfg.AuthDir == "" {
		return nil, fmt.Errorf("%w: no AuthDir (the signing keys)", ErrAdminConfig)
	}
	if ad.cfg.Authority != nil {
		return ad.cfg.Authority, nil
	}
	a, err := LoadAuthority(ad.cfg.AuthDir)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	return a, nil
}

// publish saves a in AuthDir and pushes its accounts to the servers.
func (ad *Admin) publish(ctx context.Context, a *Authority) error {
	if err := a.Save(ad.cfg.AuthDir); err != nil {
		return err
	}
	return a.PushAccountWith(ctx, ad.cfg.Dial, ad.cfg.AuthDir)
}

func (ad *Admin) streams(ctx context.Context, t Tenant) error {
	if ad.cfg.Streams == nil {
		return nil
	}
	return ad.cfg.Streams(ctx, t)
}

// Add creates tenant t: a user of its own account (created when missing,
// and pushed before the user is handed out), its streams, then its record.
// It returns t with its user and account, and the user's credentials
// (write them with WriteCreds). A tenant that exists fails wrapping
// ErrExists.
func (ad *Admin) Add(ctx context.Context, t Tenant) (Tenant, []byte, error) {
	if err := t.Validate(); err != nil {
		return Tenant{}, nil, err
	}
	a, err := ad.authority()
	if err != nil {
		return Tenant{}, nil, err
	}
	if _, err := ad.reg.Get(ctx, t.Name); err == nil {
		return Tenant{}, nil, fmt.Errorf("%w: %s", ErrExists, t.Name)
	}
	creds, err := ad.issue(ctx, a, &t)
	if err != nil {
		return Tenant{}, nil, err
	}
	if err := ad.streams(ctx, t); err != nil {
		return Tenant{}, nil, err
	}
	if err := ad.reg.Create(ctx, t); err != nil {
		return Tenant{}, nil, err
	}
	return t, creds, nil
}

// issue issues a user of t's own account (creating the account when
// missing), publishes the authority, and records the user and account in
// t.
func (ad *Admin) issue(ctx context.Context, a *Authority, t *Tenant) ([]byte, error) {
	creds, pub, err := a.IssueUser(RoleTenant, t.Name, "")
	if err != nil {
		return nil, err
	}
	if t.Account, err = a.TenantAccountKey(t.Name); err != nil {
		return nil, err
	}
	t.User = pub
	if err := ad.publish(ctx, a); err != nil {
		return nil, fmt.Errorf("the server must know the tenant's account before it admits its user: %w", err)
	}
	return creds, nil
}

// Set changes tenant name's record with change (its quotas: the schedulers
// apply them at once), updates its streams and stores it. Its credentials
// stay.
func (ad *Admin) Set(ctx context.Context, name string, change func(*Tenant)) (Tenant, error) {
	t, err := ad.reg.Get(ctx, name)
	if err != nil {
		return Tenant{}, err
	}
	change(&t)
	if t.Name != name {
		return Tenant{}, fmt.Errorf("%w: Set renames %s to %s", ErrInvalid, name, t.Name)
	}
	if err := t.Validate(); err != nil {
		return Tenant{}, err
	}
	if err := ad.streams(ctx, t); err != nil {
		return Tenant{}, err
	}
	if err := ad.reg.Put(ctx, t); err != nil {
		return Tenant{}, err
	}
	return t, nil
}

// Remove removes tenant name: it revokes its gateway tokens and every user
// of its account (its credentials and the gateway's users of it; pushed,
// so live connections are closed at once), then deletes its record. Its
// streams, with any backlog, are kept for the operator to inspect or
// purge.
func (ad *Admin) Remove(ctx context.Context, name string) error {
	t, err := ad.reg.Get(ctx, name)
	if err != nil {
		return err
	}
	// The gateway refuses a removed tenant's tokens anyway (Verify checks
	// the record); deleting them leaves nothing to reuse if the name is
	// added again.
	ts, err := ad.Tokens(ctx)
	if err != nil {
		return err
	}
	if _, err := ts.RevokeTenant(ctx, name); err != nil {
		return fmt.Errorf("revoke the tenant's gateway tokens: %w", err)
	}
	a, err := ad.authority()
	if err != nil {
		return err
	}
	if err := revokeUsers(a, t); err != nil {
		return err
	}
	if err := ad.publish(ctx, a); err != nil {
		return err
	}
	return ad.reg.Delete(ctx, name)
}

// revokeUsers revokes every user of t: all of its account's, and a user of
// the shared account from before tenants had accounts.
func revokeUsers(a *Authority, t Tenant) error {
	if t.Account != "" {
		if _, err := a.EnsureTenantAccount(t.Name); err != nil {
			return err
		}
		return a.RevokeTenant(t.Name)
	}
	if t.User != "" {
		return a.Revoke(t.User)
	}
	return nil
}

// Reissue revokes tenant name's current user and issues a new one in its
// own account (moving a tenant of an older version into it, as Migrate),
// and returns its credentials: the previous ones stop working.
func (ad *Admin) Reissue(ctx context.Context, name string) ([]byte, error) {
	a, err := ad.authority()
	if err != nil {
		return nil, err
	}
	t, err := ad.reg.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if _, err := a.Migrate(&t); err != nil {
		return nil, err
	}
	if t.User != "" {
		if err := a.RevokeTenantUser(t.Name, t.User); err != nil {
			return nil, err
		}
	}
	creds, err := ad.issue(ctx, a, &t)
	if err != nil {
		return nil, err
	}
	if err := ad.reg.Put(ctx, t); err != nil {
		return nil, err
	}
	return creds, nil
}

// Migrate moves every registered tenant without an account into its own
// (Authority.Migrate), publishes the authority, then updates their
// records. It returns the tenants it moved: their old credentials are
// revoked, and each needs new ones (Reissue). A second call moves none.
func (ad *Admin) Migrate(ctx context.Context) ([]Tenant, error) {
	a, err := ad.authority()
	if err != nil {
		return nil, err
	}
	all, err := ad.reg.List(ctx)
	if err != nil {
		return nil, err
	}
	var moved []Tenant
	for _, t := range all {
		ok, err := a.Migrate(&t)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", t.Name, err)
		}
		if ok {
			moved = append(moved, t)
		}
	}
	if len(moved) == 0 {
		return nil, nil
	}
	if err := ad.publish(ctx, a); err != nil {
		return nil, err
	}
	for _, t := range moved {
		if err := ad.reg.Put(ctx, t); err != nil {
			return nil, err
		}
	}
	return moved, nil
}
