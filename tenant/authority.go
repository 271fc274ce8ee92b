package tenant

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Account names of an Authority.
const (
	// OperatorName names the operator of a Paddock deployment.
	OperatorName = "paddock"
	// SystemAccountName names the system account.
	SystemAccountName = "SYS"
	// AccountName names the application account: every stream, KV bucket,
	// tenant and service of Paddock lives in it.
	AccountName = "PADDOCK"
)

var (
	// ErrInsecureFile is wrapped when a seed file is readable or writable
	// by the group or by others.
	ErrInsecureFile = errors.New("tenant: seed file open to others")
	// ErrAuthority is wrapped when the files of an authority do not belong
	// together or do not decode.
	ErrAuthority = errors.New("tenant: bad authority")
)

// Authority holds the signing keys of one Paddock deployment in operator
// mode: the operator, the system account SYS and the application account
// PADDOCK (JetStream on, unlimited). Its seeds sign every credential of the
// deployment: keep the directory it is saved in private. It is safe for
// concurrent use.
type Authority struct {
	operator    nkeys.KeyPair
	operatorJWT string
	sys         nkeys.KeyPair
	sysJWT      string
	account     nkeys.KeyPair

	mu         sync.Mutex
	accClaims  *jwt.AccountClaims
	accountJWT string
	gateway    nkeys.KeyPair // the gateway's scoped signing key; nil until EnsureGatewayKey
	tenants    map[string]*tenantAccount
}

// NewAuthority creates new operator, SYS and PADDOCK keys and signs their
// JWTs.
func NewAuthority() (*Authority, error) {
	op, err := nkeys.CreateOperator()
	if err != nil {
		return nil, fmt.Errorf("tenant: operator key: %w", err)
	}
	a := &Authority{operator: op}
	if a.sys, err = nkeys.CreateAccount(); err != nil {
		return nil, fmt.Errorf("tenant: system account key: %w", err)
	}
	if a.account, err = nkeys.CreateAccount(); err != nil {
		return nil, fmt.Errorf("tenant: account key: %w", err)
	}
	opPub, sysPub, accPub := publicKey(op), publicKey(a.sys), publicKey(a.account)
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = OperatorName
	oc.SystemAccount = sysPub
	if a.operatorJWT, err = oc.Encode(op); err != nil {
		return nil, fmt.Errorf("tenant: operator JWT: %w", err)
	}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = SystemAccountName
	if a.sysJWT, err = sc.Encode(op); err != nil {
		return nil, fmt.Errorf("tenant: system account JWT: %w", err)
	}
	a.accClaims = jwt.NewAccountClaims(accPub)
	a.accClaims.Name = AccountName
	a.accClaims.Limits.JetStreamLimits = jwt.JetStreamLimits{
		MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit}
	a.accClaims.Exports = paddockExports()
	if a.accountJWT, err = a.accClaims.Encode(op); err != nil {
		return nil, fmt.Errorf("tenant: account JWT: %w", err)
	}
	return a, nil
}

// publicKey is the public key of a key pair made by nkeys (it cannot fail
// for one).
func publicKey(kp nkeys.KeyPair) string {
	pub, _ := kp.PublicKey()
	return pub
}

// OperatorJWT is the operator's JWT (the servers trust it).
func (a *Authority) OperatorJWT() string { return a.operatorJWT }

// OperatorKey is the operator's public key ("O…").
func (a *Authority) OperatorKey() string { return publicKey(a.operator) }

// SystemAccountKey is the public key of the system account ("A…").
func (a *Authority) SystemAccountKey() string { return publicKey(a.sys) }

// SystemAccountJWT is the system account's JWT.
func (a *Authority) SystemAccountJWT() string { return a.sysJWT }

// AccountKey is the public key of the PADDOCK account ("A…").
func (a *Authority) AccountKey() string { return publicKey(a.account) }

// AccountJWT is the current JWT of the PADDOCK account (with its
// revocations).
func (a *Authority) AccountJWT() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.accountJWT
}

// Revoke revokes the user userPub (every JWT issued to it until now) and
// re-signs the PADDOCK account JWT. The servers refuse the user once the
// new JWT reaches them (PushAccount, or the preload of a restarted
// server); Save the authority too, or the revocation is lost with it.
func (a *Authority) Revoke(userPub string) error {
	if !nkeys.IsValidPublicUserKey(userPub) {
		return fmt.Errorf("tenant: revoke %q: not the public key of a user", userPub)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, s, err := a.revoked(a.accClaims, userPub)
	if err != nil {
		return fmt.Errorf("tenant: re-sign account JWT: %w", err)
	}
	a.accClaims, a.accountJWT = c, s
	return nil
}

// revoked returns a copy of the account claims c with userPub revoked (the
// users issued up to this second, inclusive), and its JWT.
func (a *Authority) revoked(c *jwt.AccountClaims, userPub string) (*jwt.AccountClaims, string, error) {
	n := *c
	n.Revocations = jwt.RevocationList{}
	for k, v := range c.Revocations {
		n.Revocations[k] = v
	}
	n.Revoke(userPub)
	token, err := n.Encode(a.operator)
	return &n, token, err
}

// Revoked reports whether userPub was revoked in PADDOCK or in a tenant
// account (by key, or with all of a tenant's users).
func (a *Authority) Revoked(userPub string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.accClaims.Revocations[userPub]; ok {
		return true
	}
	for _, ta := range a.tenants {
		if _, ok := ta.claims.Revocations[userPub]; ok {
			return true
		}
	}
	return false
}

// RevokedUser reports whether the servers refuse u (UserOfCreds) for a
// revocation in its account: of its key, or of every user of the account
// issued until then (RevokeTenant, what `paddock tenant rm` does), which
// Revoked, given only a key, cannot see.
func (a *Authority) RevokedUser(u User) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	var rev jwt.RevocationList
	if u.Account == publicKey(a.account) {
		rev = a.accClaims.Revocations
	}
	for _, ta := range a.tenants {
		if ta.claims.Subject == u.Account {
			rev = ta.claims.Revocations
		}
	}
	return rev.IsRevoked(u.Key, u.IssuedAt)
}

// The files of a saved Authority.
var authorityFiles = [...]struct{ seed, jwt string }{
	{"operator.nk", "operator.jwt"}, {"sys.nk", "sys.jwt"}, {"account.nk", "account.jwt"},
}

// GatewayKeyFile, in the directory of a saved Authority, holds the seed of
// the gateway's signing key, once EnsureGatewayKey made one (an authority
// saved before has none).
const GatewayKeyFile = "gateway.nk"

// Save writes the authority into dir (created, or narrowed, to 0700), each
// file 0600 and replaced atomically; the gateway key goes first, so that
// an account JWT naming it is never saved without it.
func (a *Authority) Save(dir string) error {
	if err := privateDir(dir); err != nil {
		return err
	}
	a.mu.Lock()
	accJWT, gw := a.accountJWT, a.gateway
	a.mu.Unlock()
	if gw != nil {
		seed, err := gw.Seed()
		if err != nil {
			return fmt.Errorf("tenant: save %s: %w", GatewayKeyFile, err)
		}
		if err := writePrivate(filepath.Join(dir, GatewayKeyFile), append(seed, '\n')); err != nil {
			return err
		}
	}
	if err := a.saveTenants(dir); err != nil {
		return err
	}
	keys := []nkeys.KeyPair{a.operator, a.sys, a.account}
	jwts := []string{a.operatorJWT, a.sysJWT, accJWT}
	for i, f := range authorityFiles {
		seed, err := keys[i].Seed()
		if err != nil {
			return fmt.Errorf("tenant: save %s: %w", f.seed, err)
		}
		if err := writePrivate(filepath.Join(dir, f.seed), append(seed, '\n')); err != nil {
			return err
		}
		if err := writePrivate(filepath.Join(dir, f.jwt), []byte(jwts[i]+"\n")); err != nil {
			return err
		}
	}
	return nil
}

// LoadAuthority reads an authority saved by Save, with its gateway key
// when it has one. It refuses a seed file that the group or others may
// read or write.
func LoadAuthority(dir string) (*Authority, error) {
	var keys [3]nkeys.KeyPair
	var jwts [3]string
	for i, f := range authorityFiles {
		var err error
		if keys[i], err = readSeed(filepath.Join(dir, f.seed)); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(dir, f.jwt))
		if err != nil {
			return nil, fmt.Errorf("tenant: load authority: %w", err)
		}
		jwts[i] = strings.TrimSpace(string(b))
	}
	a := &Authority{operator: keys[0], operatorJWT: jwts[0], sys: keys[1], sysJWT: jwts[1], account: keys[2], accountJWT: jwts[2]}
	gw, err := readSeed(filepath.Join(dir, GatewayKeyFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	a.gateway = gw
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("%w in %s: %w", ErrAuthority, dir, err)
	}
	if err := a.loadTenants(dir); err != nil {
		return nil, err
	}
	return a, nil
}

// check verifies that the keys and JWTs of a loaded authority belong
// together, and decodes the account claims.
func (a *Authority) check() error {
	opPub := publicKey(a.operator)
	if !nkeys.IsValidPublicOperatorKey(opPub) || !nkeys.IsValidPublicAccountKey(publicKey(a.sys)) ||
		!nkeys.IsValidPublicAccountKey(publicKey(a.account)) {
		return errors.New("a seed is not of the right kind (operator, account, account)")
	}
	if a.gateway != nil && !nkeys.IsValidPublicAccountKey(publicKey(a.gateway)) {
		return errors.New(GatewayKeyFile + " is not an account signing key (a seed \"SA…\")")
	}
	oc, err := jwt.DecodeOperatorClaims(a.operatorJWT)
	if err != nil {
		return fmt.Errorf("operator.jwt: %w", err)
	}
	if oc.Subject != opPub || oc.SystemAccount != publicKey(a.sys) {
		return errors.New("operator.jwt is not the operator of operator.nk with system account sys.nk")
	}
	sc, err := jwt.DecodeAccountClaims(a.sysJWT)
	if err != nil {
		return fmt.Errorf("sys.jwt: %w", err)
	}
	if sc.Subject != publicKey(a.sys) || sc.Issuer != opPub {
		return errors.New("sys.jwt is not the account of sys.nk signed by the operator")
	}
	if a.accClaims, err = jwt.DecodeAccountClaims(a.accountJWT); err != nil {
		return fmt.Errorf("account.jwt: %w", err)
	}
	if a.accClaims.Subject != publicKey(a.account) || a.accClaims.Issuer != opPub {
		return errors.New("account.jwt is not the account of account.nk signed by the operator")
	}
	return nil
}

// LoadOrCreateAuthority loads the authority saved in dir, or, when dir
// holds none of its files, creates and saves a new one (created is then
// true). A dir with only some of the files is an error: restore them or
// remove the directory (every credential it signed is then void).
func LoadOrCreateAuthority(dir string) (a *Authority, created bool, err error) {
	present := 0
	for _, f := range authorityFiles {
		for _, name := range []string{f.seed, f.jwt} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				present++
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, false, fmt.Errorf("tenant: %w", err)
			}
		}
	}
	switch present {
	case 0:
		if a, err = NewAuthority(); err == nil {
			err = a.Save(dir)
		}
		return a, err == nil, err
	case 2 * len(authorityFiles):
		a, err = LoadAuthority(dir)
		return a, false, err
	}
	return nil, false, fmt.Errorf("%w: %s holds only %d of the %d files of an authority: restore them, or remove the directory to start over (every credential it signed stops working)",
		ErrAuthority, dir, present, 2*len(authorityFiles))
}

// readSeed reads an nkey seed file, refusing one open to others.
func readSeed(path string) (nkeys.KeyPair, error) {
	if err := CheckPrivateFile(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tenant: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrAuthority, path, err)
	}
	return kp, nil
}

// CheckPrivateFile fails, wrapping ErrInsecureFile, unless only the owner
// may read and write path (a seed or credentials file).
func CheckPrivateFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %04o, so others may read the key in it: run `chmod 600 %s`",
			ErrInsecureFile, path, m, path)
	}
	return nil
}

// privateDir creates dir 0700, or narrows an existing one to 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	return nil
}

// writePrivate replaces path with data atomically, the file 0600.
func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*") // 0600
	if err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("tenant: write %s: %w", path, err)
	}
	return nil
}

// WriteCreds writes a credentials file 0600 (atomically), creating its
// directory 0700 when missing.
func WriteCreds(path string, creds []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("tenant: %w", err)
	}
	return writePrivate(path, creds)
}
