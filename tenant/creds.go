package tenant

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/paddockhq/paddock/job"
)

// Tags a user JWT carries (NATS lower-cases tags; tenant names and roles
// are lower case already).
const (
	// TagTenantPrefix + tenant marks the user of a tenant.
	TagTenantPrefix = "paddock-tenant:"
	// TagRolePrefix + role marks the role of a user.
	TagRolePrefix = "paddock-role:"
)

// ErrNotTenant is wrapped when credentials are not those of a tenant.
var ErrNotTenant = errors.New("tenant: not a tenant's credentials")

// User is what a credentials file says about its user.
type User struct {
	// Key is the user's public nkey ("U…").
	Key string
	// Name is the user's name ("tenant:dev", "svc:scheduler").
	Name string
	// Grant is what the user's JWT allows it to publish and subscribe to.
	Grant Grant
	// Role is the role in the user's tags; empty for a user that no
	// Authority issued.
	Role Role
	// Tenant is the tenant of a RoleTenant user.
	Tenant string
	// Account is the public key of the account that signed the user.
	Account string
	// IssuedAt is when the user JWT was signed.
	IssuedAt time.Time
}

// IssueUser creates a user with role's permissions (Permissions) and
// returns its credentials file (the text nsc writes: the user JWT and its
// seed) and public key. A service's user belongs to PADDOCK; a tenant's
// (RoleTenant, tenantName naming the tenant; empty otherwise) belongs to
// the tenant's own account, which IssueUser creates when it is missing
// (EnsureTenantAccount: then Save the authority and push it, or the
// servers refuse the user). name defaults to "tenant:<tenant>",
// "svc:<role>" or "admin".
func (a *Authority) IssueUser(role Role, tenantName, name string) (creds []byte, pub string, err error) {
	perms, err := Permissions(role, tenantName)
	if err != nil {
		return nil, "", err
	}
	if name == "" {
		name = defaultUserName(role, tenantName)
	}
	tags := []string{TagRolePrefix + string(role)}
	signer := a.account
	if role == RoleTenant {
		tags = append(tags, TagTenantPrefix+tenantName)
		if _, err := a.EnsureTenantAccount(tenantName); err != nil {
			return nil, "", err
		}
		if signer, err = a.tenantAccountKey(tenantName); err != nil {
			return nil, "", err
		}
	}
	return issue(signer, name, perms, tags)
}

func defaultUserName(role Role, tenantName string) string {
	switch role {
	case RoleTenant:
		return "tenant:" + tenantName
	case RoleAdmin:
		return "admin"
	}
	return "svc:" + string(role)
}

// IssueSystemUser creates a user of the system account, for PushAccount
// (and the server's monitoring subjects). It may do everything in SYS.
func (a *Authority) IssueSystemUser() (creds []byte, pub string, err error) {
	return issue(a.sys, "sys", jwt.Permissions{}, nil)
}

// issue signs a new user with the account key acc.
func issue(acc nkeys.KeyPair, name string, perms jwt.Permissions, tags []string) ([]byte, string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", fmt.Errorf("tenant: user key: %w", err)
	}
	pub := publicKey(kp)
	seed, err := kp.Seed()
	if err != nil {
		return nil, "", fmt.Errorf("tenant: user seed: %w", err)
	}
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.Permissions = perms
	uc.Tags.Add(tags...)
	token, err := uc.Encode(acc)
	if err != nil {
		return nil, "", fmt.Errorf("tenant: sign user %s: %w", name, err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return nil, "", fmt.Errorf("tenant: creds of %s: %w", name, err)
	}
	return creds, pub, nil
}

// UserOfCreds reads the user JWT in a credentials file. It checks that the
// JWT is a well-formed user JWT signed by the key it names, not that a
// server trusts that key.
func UserOfCreds(creds []byte) (User, error) {
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		return User{}, fmt.Errorf("tenant: credentials: %w", err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return User{}, fmt.Errorf("tenant: credentials: no user JWT: %w", err)
	}
	u := User{Key: uc.Subject, Name: uc.Name, Account: uc.Issuer, IssuedAt: time.Unix(uc.IssuedAt, 0),
		Grant: Grant{Pub: append([]string(nil), uc.Pub.Allow...), Sub: append([]string(nil), uc.Sub.Allow...)}}
	if uc.IssuerAccount != "" {
		u.Account = uc.IssuerAccount
	}
	for _, tag := range uc.Tags {
		if r, ok := strings.CutPrefix(tag, TagRolePrefix); ok {
			u.Role = Role(r)
		}
		if t, ok := strings.CutPrefix(tag, TagTenantPrefix); ok {
			u.Tenant = t
		}
	}
	return u, nil
}

// TenantOfCreds returns the tenant whose user a credentials file holds, or
// an error wrapping ErrNotTenant for any other user.
func TenantOfCreds(creds []byte) (string, error) {
	u, err := UserOfCreds(creds)
	if err != nil {
		return "", err
	}
	if u.Role != RoleTenant || u.Tenant == "" {
		return "", fmt.Errorf("%w: user %q has role %q", ErrNotTenant, u.Name, u.Role)
	}
	if err := job.CheckTenant(u.Tenant); err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotTenant, err)
	}
	return u.Tenant, nil
}

// TenantOfCredsFile is TenantOfCreds of the file at path.
func TenantOfCredsFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("tenant: %w", err)
	}
	t, err := TenantOfCreds(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}
