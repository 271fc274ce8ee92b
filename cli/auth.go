package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/devstack"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

// authFlags are how a command authenticates to NATS and Redis. A client
// command without --creds uses the dev tenant's credentials of the local
// `paddock up` (<data-dir>/auth/creds/dev.creds) when they exist, as it
// finds the span file.
type authFlags struct {
	creds, nkey            string
	tlsCA, tlsCert, tlsKey string
	tenant                 string
	redisPasswordFile      string
}

func (a *authFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&a.creds, "creds", "", "NATS credentials `file` (.creds: a user JWT and its seed, from 'paddock tenant add' or nsc); also $NATS_CREDS")
	fs.StringVar(&a.nkey, "nkey", "", "NATS NKey seed `file` (a user the server config lists by public key)")
	fs.StringVar(&a.tlsCA, "tls-ca", "", "PEM `file` of the CAs that sign the NATS server's certificate (turns TLS on)")
	fs.StringVar(&a.tlsCert, "tls-cert", "", "client certificate PEM `file` for a NATS server that verifies clients (with --tls-key)")
	fs.StringVar(&a.tlsKey, "tls-key", "", "client key PEM `file` (with --tls-cert)")
	fs.StringVar(&a.tenant, "tenant", "", "the tenant to act as (default: the tenant of --creds; without credentials, \"default\")")
	fs.StringVar(&a.redisPasswordFile, "redis-password-file", "", "`file` holding the Redis password (user \"paddock\" unless --redis-url names one), so no password is in a URL")
	setEnvAliases(fs, "creds", "NATS_CREDS")
}

// authDir is where `paddock up` keeps its generated credentials.
func (g *globals) authDir() string { return filepath.Join(g.dataDirPath(), "auth") }

// dataDirPath is --data-dir, or the default one.
func (g *globals) dataDirPath() string {
	if g.dataDir != "" {
		return g.dataDir
	}
	return devstack.DefaultDataDir()
}

// localCreds is name's credentials file in the local `paddock up`'s auth
// dir, or "" when there is none.
func (g *globals) localCreds(name string) string {
	p := filepath.Join(g.authDir(), "creds", name+".creds")
	if fileExists(p) {
		return p
	}
	return ""
}

// clientTenant is the tenant a client command acts as, and its creds file.
func (g *globals) clientTenant() (creds, tenantName string, err error) {
	creds = g.auth.creds
	if creds == "" && g.auth.nkey == "" {
		creds = g.localCreds("dev")
	}
	tenantName = g.auth.tenant
	if tenantName == "" && creds != "" {
		tenantName, err = tenant.TenantOfCredsFile(creds)
		if errors.Is(err, tenant.ErrNotTenant) {
			err = fmt.Errorf("--creds %s are not a tenant's credentials (a service's or admin's?): give a tenant's, or --tenant NAME", creds)
		}
		if err != nil {
			return "", "", err
		}
	}
	if tenantName == "" {
		tenantName = job.DefaultTenant
	}
	return creds, tenantName, job.CheckTenant(tenantName)
}

// connectAs connects to NATS with creds (empty: none, or --nkey) as
// tenantName ("" for a service).
func (g *globals) connectAs(ctx context.Context, name, creds, tenantName string) (*nats.Conn, error) {
	if err := checkNATSURL(g.natsURL); err != nil {
		return nil, err
	}
	nc, err := client.Connect(ctx, client.ConnectConfig{URL: g.natsURL, Name: name, Creds: creds, NKey: g.auth.nkey,
		TLSCA: g.auth.tlsCA, TLSCert: g.auth.tlsCert, TLSKey: g.auth.tlsKey, Tenant: tenantName, Logger: g.logger})
	if err != nil {
		return nil, fmt.Errorf("%w (start a stack with `paddock up`, or set --nats-url / NATS_URL and --creds / NATS_CREDS)", err)
	}
	return nc, nil
}

// connectClient connects a client command as its tenant.
func (g *globals) connectClient(ctx context.Context) (*nats.Conn, string, error) {
	creds, tn, err := g.clientTenant()
	if err != nil {
		return nil, "", err
	}
	nc, err := g.connectAs(ctx, "paddock-cli", creds, tn)
	return nc, tn, err
}

// adminCreds are the credentials of tenant administration: --creds, else
// the local `paddock up`'s admin user.
func (g *globals) adminCreds() (string, error) {
	if g.auth.creds != "" || g.auth.nkey != "" {
		return g.auth.creds, nil
	}
	if p := g.localCreds("admin"); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("no admin credentials: give --creds FILE (an admin user's), or run `paddock up` on this machine (it writes %s)",
		filepath.Join(g.authDir(), "creds", "admin.creds"))
}

// redisPassword applies --redis-password-file to a Redis URL's options.
func (a *authFlags) redisPassword() (string, error) {
	if a.redisPasswordFile == "" {
		return "", nil
	}
	if err := checkSecretFile(a.redisPasswordFile); err != nil {
		return "", fmt.Errorf("--redis-password-file: %w", err)
	}
	b, err := os.ReadFile(a.redisPasswordFile)
	if err != nil {
		return "", fmt.Errorf("--redis-password-file: %w", err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("--redis-password-file %s is empty", a.redisPasswordFile)
	}
	return pw, nil
}

// checkSecretFile refuses a secret file that anyone but its owner and group
// may read, or anyone but its owner may write. Group read is allowed: a
// Kubernetes Secret mounted for a non-root pod is 0440 through fsGroup
// whatever its defaultMode says.
func checkSecretFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if perm := st.Mode().Perm(); perm&0o027 != 0 {
		return fmt.Errorf("%s is mode %04o: others may read it or more than its owner may write it; chmod 600 (or 640) %s", path, perm, path)
	}
	return nil
}
