package devstack

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/paddockhq/paddock/tenant"
)

// DevTenant is the tenant LoadOrCreateAuth issues first.
const DevTenant = "dev"

// Auth is the generated security state of `paddock up`, kept under
// <data dir>/auth (0700, every file 0600):
//
//	operator.nk operator.jwt sys.nk sys.jwt account.nk account.jwt   the Authority
//	gateway.nk                                                       the gateway's scoped signing key (tenant.Minter)
//	creds/admin.creds creds/scheduler.creds creds/worker.creds       service users
//	creds/gateway.creds                                              the gateway's service user (tenant.RoleGateway)
//	creds/sys.creds                                                  system-account user (PushAccount)
//	creds/dev.creds                                                  the first tenant, dev (a user of its own account)
//	tenants/<tenant>.jwt                                             each tenant's NATS account
//	redis.password                                                   the Redis password of DefaultRedisUser
type Auth struct {
	// Dir is <data dir>/auth.
	Dir string
	// Authority signs every credential; pass it as NATSConfig.Auth.
	Authority *tenant.Authority
	// Created is true when this call created the authority.
	Created bool
	// AccountChanged is true when this call re-signed an account JWT of an
	// existing authority (one saved by an older version is brought up to
	// this one: tenant.Authority.EnsureGatewayKey; dev moved into its own
	// account). A NATS server started after this call preloads the new JWTs
	// (NATSConfig.Auth); one already running must get them with
	// Authority.PushAccount over SysCreds, or it refuses the users they
	// sign.
	AccountChanged bool
	// DevMoved is true when this call moved dev into its own account: its
	// old credentials (a user of PADDOCK) are revoked and DevCreds holds new
	// ones.
	DevMoved bool
	// Paths of the credentials files.
	AdminCreds, SchedulerCreds, WorkerCreds, SysCreds string
	// GatewayCreds is the gateway's service user (tenant.RoleGateway);
	// connect it with tenant.GatewayInboxPrefix.
	GatewayCreds string
	// GatewayKey is the seed file of the gateway's signing key
	// (tenant.LoadMinter, with Authority.AccountKey).
	GatewayKey string
	// DevCreds is the path of the dev tenant's credentials, issued with a
	// new authority only (so that a removed dev tenant stays removed); empty
	// when the file does not exist.
	DevCreds string
	// DevUser is the public key of the user in DevCreds, for the dev
	// tenant's registry record (tenant.Tenant.User).
	DevUser string
	// RedisUser and RedisPassword are Redis's credentials (RedisConfig);
	// RedisPasswordFile holds the password.
	RedisUser, RedisPassword, RedisPasswordFile string
}

// LoadOrCreateAuth loads the Auth kept in dataDir/auth, creating what is
// missing: the authority (tenant.LoadOrCreateAuthority) and its gateway
// key (see AccountChanged), a service's credentials file that is missing,
// revoked or not of this authority, and the Redis password. It refuses a
// seed, credentials or password file that others may read (chmod 600 it).
func LoadOrCreateAuth(dataDir string) (*Auth, error) {
	dir := filepath.Join(dataDir, "auth")
	a, created, err := tenant.LoadOrCreateAuthority(dir)
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	changed, err := a.EnsureGatewayKey()
	if err == nil && changed {
		err = a.Save(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("devstack: gateway key: %w", err)
	}
	creds := filepath.Join(dir, "creds")
	au := &Auth{Dir: dir, Authority: a, Created: created, AccountChanged: changed && !created, RedisUser: DefaultRedisUser,
		AdminCreds: filepath.Join(creds, "admin.creds"), SchedulerCreds: filepath.Join(creds, "scheduler.creds"),
		WorkerCreds: filepath.Join(creds, "worker.creds"), SysCreds: filepath.Join(creds, "sys.creds"),
		GatewayCreds: filepath.Join(creds, "gateway.creds"), GatewayKey: filepath.Join(dir, tenant.GatewayKeyFile),
		RedisPasswordFile: filepath.Join(dir, "redis.password")}
	for path, role := range map[string]tenant.Role{au.AdminCreds: tenant.RoleAdmin, au.SchedulerCreds: tenant.RoleScheduler,
		au.WorkerCreds: tenant.RoleWorker, au.GatewayCreds: tenant.RoleGateway} {
		issue := func() ([]byte, string, error) { return a.IssueUser(role, "", "") }
		if _, err := ensureCreds(a, path, a.AccountKey(), role, issue); err != nil {
			return nil, err
		}
	}
	if _, err := ensureCreds(a, au.SysCreds, a.SystemAccountKey(), "", a.IssueSystemUser); err != nil {
		return nil, err
	}
	if err := au.ensureDev(creds); err != nil {
		return nil, err
	}
	if au.DevMoved || au.Created {
		// The dev tenant's account (and the revocation of its old user).
		if err := a.Save(dir); err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
	}
	if au.RedisPassword, err = ensurePassword(au.RedisPasswordFile); err != nil {
		return nil, err
	}
	return au, nil
}

// ensureDev issues the dev tenant with a new authority, and otherwise
// reads the one that exists, moving a dev of an older version (a user of
// PADDOCK) into its own account: the old user is revoked, dev.creds is
// written anew (DevMoved).
func (au *Auth) ensureDev(credsDir string) error {
	path := filepath.Join(credsDir, DevTenant+".creds")
	issue := func() ([]byte, string, error) { return au.Authority.IssueUser(tenant.RoleTenant, DevTenant, "") }
	if au.Created {
		own, err := au.Authority.TenantAccountKey(DevTenant)
		if err != nil {
			return err
		}
		pub, err := ensureCreds(au.Authority, path, own, "", issue)
		au.DevCreds, au.DevUser = path, pub
		return err
	}
	b, err := readPrivate(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	u, err := tenant.UserOfCreds(b)
	if err != nil {
		return fmt.Errorf("devstack: %s: %w", path, err)
	}
	au.DevCreds, au.DevUser = path, u.Key
	own, err := au.Authority.TenantAccountKey(DevTenant)
	if err != nil || u.Account == own || au.Authority.Revoked(u.Key) {
		return err
	}
	if err := au.Authority.Revoke(u.Key); err != nil {
		return fmt.Errorf("devstack: revoke dev's user of the shared account: %w", err)
	}
	creds, pub, err := issue()
	if err == nil {
		err = tenant.WriteCreds(path, creds)
	}
	if err != nil {
		return fmt.Errorf("devstack: move dev into its own account: %w", err)
	}
	au.DevUser, au.DevMoved, au.AccountChanged = pub, true, true
	return nil
}

// ensureCreds keeps the credentials file at path when it holds a user of
// account that a has not revoked, and otherwise writes new ones from
// issue. It returns the user's public key.
func ensureCreds(a *tenant.Authority, path, account string, role tenant.Role, issue func() ([]byte, string, error)) (string, error) {
	b, err := readPrivate(path)
	switch {
	case err == nil:
		if u, err := tenant.UserOfCreds(b); err == nil && u.Account == account && !a.Revoked(u.Key) &&
			(role == "" || u.Role == role && u.Grant.Current(role, "")) {
			return u.Key, nil
		}
		// A service's credentials from before its grant changed (a new
		// subject, e.g. paddock.wake.> for workers) are issued again.
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	creds, pub, err := issue()
	if err != nil {
		return "", fmt.Errorf("devstack: %s: %w", path, err)
	}
	if err := tenant.WriteCreds(path, creds); err != nil {
		return "", fmt.Errorf("devstack: %w", err)
	}
	return pub, nil
}

// ensurePassword reads the password in path, or writes a new random one.
func ensurePassword(path string) (string, error) {
	b, err := readPrivate(path)
	if err == nil {
		if pw := strings.TrimSpace(string(b)); pw != "" {
			return pw, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("devstack: %w", err)
	}
	pw := hex.EncodeToString(raw)
	if err := writePrivate(path, []byte(pw+"\n")); err != nil {
		return "", err
	}
	return pw, nil
}

// readPrivate reads a file that only its owner may read (the error wraps
// fs.ErrNotExist when it is missing).
func readPrivate(path string) ([]byte, error) {
	if err := tenant.CheckPrivateFile(path); err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	return b, nil
}

// writePrivate replaces path with data, the file 0600 and its directory
// 0700 when created.
func writePrivate(path string, data []byte) error {
	if err := tenant.WriteCreds(path, data); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return nil
}

// RedisURL is the redis:// URL of addr with au's Redis credentials.
func (au *Auth) RedisURL(addr Addr) string {
	u := url.URL{Scheme: "redis", User: url.UserPassword(au.RedisUser, au.RedisPassword), Host: addr.String()}
	return u.String()
}
