package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// SubjectClaimsUpdate is where a system-account user sends an account JWT
// for the servers' resolvers to store (what `nsc push` does).
const SubjectClaimsUpdate = "$SYS.REQ.CLAIMS.UPDATE"

// ResolverSyncInterval is how often the servers of a cluster compare their
// stored account JWTs.
const ResolverSyncInterval = 2 * time.Minute

// ConfigureServer sets the operator-mode fields of an embedded server's
// options: the trusted operator, the system account, and a "full" account
// resolver storing JWTs in resolverDir (created 0700) that accepts updates
// at run time (PushAccount), preloaded with the SYS and PADDOCK JWTs (a
// newer JWT already in resolverDir, e.g. one with later revocations, is
// kept). The caller sets JetStream and the rest.
func (a *Authority) ConfigureServer(opts *server.Options, resolverDir string) error {
	if err := privateDir(resolverDir); err != nil {
		return err
	}
	res, err := server.NewDirAccResolver(resolverDir, 0, ResolverSyncInterval, server.NoDelete)
	if err != nil {
		return fmt.Errorf("tenant: account resolver in %s: %w", resolverDir, err)
	}
	for pub, token := range a.accountJWTs() {
		if err := res.Store(pub, token); err != nil {
			res.Close()
			return fmt.Errorf("tenant: preload account %s: %w", pub, err)
		}
	}
	oc, err := jwt.DecodeOperatorClaims(a.operatorJWT)
	if err != nil {
		res.Close()
		return fmt.Errorf("%w: operator JWT: %w", ErrAuthority, err)
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.TrustedKeys = nil
	opts.SystemAccount = a.SystemAccountKey()
	opts.AccountResolver = res
	return nil
}

// ServerConfig returns the operator-mode part of a nats-server.conf for a
// standalone server (Compose, Kubernetes): the operator JWT, the system
// account, a "full" resolver storing JWTs in resolverDir, and the SYS,
// PADDOCK and tenant account JWTs preloaded (a tenant added later reaches a
// running server by PushAccount). Add listen, jetstream {…} and the rest around it.
// resolverDir must be an absolute path without quotes or control
// characters.
func (a *Authority) ServerConfig(resolverDir string) (string, error) {
	if !strings.HasPrefix(resolverDir, "/") || strings.ContainsFunc(resolverDir, func(r rune) bool {
		return r < ' ' || r == '"' || r == '\\' || r == 0x7f
	}) {
		return "", fmt.Errorf("tenant: resolver dir %q: use an absolute path without quotes, backslashes or control characters", resolverDir)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Paddock operator mode: generated, do not edit (the seeds are not here).\n")
	fmt.Fprintf(&b, "operator: %s\n", a.operatorJWT)
	fmt.Fprintf(&b, "system_account: %s\n", a.SystemAccountKey())
	fmt.Fprintf(&b, "resolver: {\n  type: full\n  dir: \"%s\"\n  allow_delete: false\n  interval: \"%s\"\n}\n",
		resolverDir, ResolverSyncInterval)
	b.WriteString("resolver_preload: {\n")
	jwts := a.accountJWTs()
	for _, pub := range slices.Sorted(maps.Keys(jwts)) {
		fmt.Fprintf(&b, "  %s: %s\n", pub, jwts[pub])
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// PushAccount sends the current PADDOCK account JWT and every tenant
// account JWT to the servers (over SubjectClaimsUpdate) and waits for one
// to store each; a "full" resolver passes them on to the others of its
// cluster. nc must be connected as a system-account user
// (IssueSystemUser). Without a deadline in ctx it waits up to 10 s.
func (a *Authority) PushAccount(ctx context.Context, nc *nats.Conn) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	jwts := a.accountJWTs()
	delete(jwts, a.SystemAccountKey())
	for _, pub := range slices.Sorted(maps.Keys(jwts)) {
		if err := pushJWT(ctx, nc, pub, jwts[pub]); err != nil {
			return err
		}
	}
	return nil
}

// pushJWT sends one account JWT and waits for a server to store it.
func pushJWT(ctx context.Context, nc *nats.Conn, pub, token string) error {
	msg, err := nc.RequestWithContext(ctx, SubjectClaimsUpdate, []byte(token))
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("tenant: push account JWT: no server answers %s: connect as a system-account user (IssueSystemUser) to a server whose resolver is \"full\"", SubjectClaimsUpdate)
	}
	if err != nil {
		return fmt.Errorf("tenant: push account JWT: %w", err)
	}
	var resp server.ServerAPIClaimUpdateResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("tenant: push account JWT: bad reply %q: %w", msg.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("tenant: push account JWT of %s: server refused it: %s (code %d)", pub, resp.Error.Description, resp.Error.Code)
	}
	if resp.Data == nil || resp.Data.Account != pub {
		return fmt.Errorf("tenant: push account JWT: unexpected reply %q", msg.Data)
	}
	return nil
}
