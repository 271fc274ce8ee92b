package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/paddockhq/paddock/tenant"
)

// EnsureDevTenant registers the dev tenant of a new `paddock up` in reg
// (its credentials were issued with the authority), and records dev's new
// user and account when LoadOrCreateAuth moved it into its own account
// (DevMoved). A dev tenant removed with `paddock tenant rm dev` stays
// removed. Without DevUser it does nothing.
func (au *Auth) EnsureDevTenant(ctx context.Context, reg *tenant.Registry, log *slog.Logger) error {
	if au.DevUser == "" {
		return nil
	}
	account, err := au.Authority.TenantAccountKey(DevTenant)
	if err != nil {
		return err
	}
	t, err := reg.Get(ctx, DevTenant)
	switch {
	case err == nil && t.Account == account && t.User == au.DevUser:
		return nil
	case err == nil && au.DevMoved:
		t.Account, t.User = account, au.DevUser
		log.Warn("tenant dev moved into its own NATS account; its old credentials are revoked", "creds", au.DevCreds)
		return reg.Put(ctx, t)
	case err == nil || !errors.Is(err, tenant.ErrNotFound):
		return err
	}
	if removed, err := au.devRevoked(); removed || err != nil {
		return err // removed with `paddock tenant rm dev`: it stays removed
	}
	if err := reg.Create(ctx, tenant.Tenant{Name: DevTenant, User: au.DevUser, Account: account}); err != nil && !errors.Is(err, tenant.ErrExists) {
		return err
	}
	log.Info("created tenant dev", "creds", au.DevCreds)
	return nil
}

// devRevoked reports whether dev's user (DevCreds) is revoked: by key, or
// with every user of its account (what `paddock tenant rm dev` does).
func (au *Auth) devRevoked() (bool, error) {
	b, err := readPrivate(au.DevCreds)
	if err != nil {
		return false, err
	}
	u, err := tenant.UserOfCreds(b)
	if err != nil {
		return false, fmt.Errorf("devstack: %s: %w", au.DevCreds, err)
	}
	return au.Authority.RevokedUser(u), nil
}

// EnsureDevToken keeps a working bearer token of the dev tenant in path
// (0600), the one `paddock up` prints: it issues one when the file is
// missing or its token no longer verifies. Without a dev tenant (removed)
// it removes the file.
func EnsureDevToken(ctx context.Context, toks *tenant.Tokens, reg *tenant.Registry, path string) error {
	if b, err := os.ReadFile(path); err == nil {
		if _, err := toks.Verify(ctx, strings.TrimSpace(string(b))); err == nil {
			return nil
		} else if !errors.Is(err, tenant.ErrBadToken) {
			return err
		}
	}
	if _, err := reg.Get(ctx, DevTenant); errors.Is(err, tenant.ErrNotFound) {
		_ = os.Remove(path)
		return nil
	} else if err != nil {
		return err
	}
	secret, _, err := toks.Issue(ctx, DevTenant, "paddock up")
	if err != nil {
		return err
	}
	return writePrivate(path, []byte(secret+"\n"))
}

// WriteServerFiles writes, beside the credentials in Dir, what the servers
// of a fleet of one's own (Compose, Kubernetes) load to trust them:
// nats-auth.conf (include it in nats-server.conf: operator mode, the
// account JWTs kept in resolverDir, a path in the NATS server's
// filesystem) and redis-users.acl (redis-server --aclfile: only RedisUser
// with RedisPassword gets in). Both are 0600.
func (au *Auth) WriteServerFiles(resolverDir string) error {
	conf, err := au.Authority.ServerConfig(resolverDir)
	if err != nil {
		return err
	}
	files := map[string]string{
		"nats-auth.conf":  conf,
		"redis-users.acl": aclUsers(au.RedisUser, au.RedisPassword),
	}
	for name, text := range files {
		if err := writePrivate(filepath.Join(au.Dir, name), []byte(text)); err != nil {
			return err
		}
	}
	return nil
}
