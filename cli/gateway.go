package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/gateway"
	"github.com/paddockhq/paddock/internal/devstack"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

// gatewayFlags are the flags of `paddock gateway` (and of `paddock up`,
// which runs one).
type gatewayFlags struct {
	addr, signingKey, heal    string
	rate, failRate            float64
	burst, maxStreams, answer int
	failBurst                 int
	maxMCP, maxNamed          int
	maxBody, sessionMaxBytes  int64
	sessionIdle, mintTTL      time.Duration
	trustedProxies            []string
	insecureCookies           bool
	// The operator's fleet page (dashboard.go, operatorHook).
	operatorTokenFile, operatorCreds, systemCreds string
}

func (f *gatewayFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "gateway-addr", "127.0.0.1:8080", "listen address of the gateway (HTTP API /v1, MCP /mcp); off: no gateway")
	fs.StringVar(&f.signingKey, "gateway-signing-key", "", "the gateway's scoped signing key (default <data-dir>/auth/gateway.nk): it acts as any tenant, with that tenant's permissions only")
	fs.StringVar(&f.heal, "gateway-heal", "rules", "heal mode of jobs the gateway builds, and of API jobs that name none: off, rules or llm")
	fs.Float64Var(&f.rate, "gateway-rate", 20, "requests per second of one token; more get 429 with Retry-After")
	fs.IntVar(&f.burst, "gateway-burst", 40, "burst of one token's requests")
	fs.IntVar(&f.maxStreams, "gateway-max-streams", 8, "event streams (SSE) one token may hold open")
	fs.IntVar(&f.answer, "gateway-answer-chars", 10_000, "characters of output in a bash tool answer (the rest is in the spill file)")
	fs.Int64Var(&f.maxBody, "gateway-max-body-bytes", 1<<20, "bound of a request body; larger get 413")
	fs.Int64Var(&f.sessionMaxBytes, "gateway-session-max-bytes", 256<<20, "byte quota of a session's workspace")
	fs.DurationVar(&f.sessionIdle, "gateway-session-idle", 30*time.Minute, "a session unused this long ends and its workspace is deleted (longer than the 330 s a command may take)")
	fs.DurationVar(&f.mintTTL, "gateway-identity-ttl", time.Hour, "lifetime of the NATS users the gateway mints per tenant (renewed on reconnect)")
	fs.Float64Var(&f.failRate, "gateway-auth-fail-rate", 1, "failed credential checks per second allowed to one client address; past the burst, its credentials get 429 before any lookup")
	fs.IntVar(&f.failBurst, "gateway-auth-fail-burst", 20, "burst of one client address's failed credential checks")
	fs.StringSliceVar(&f.trustedProxies, "gateway-trusted-proxies", nil, "addresses or CIDRs of reverse proxies whose X-Forwarded-For (client address) and X-Forwarded-Proto are believed")
	fs.BoolVar(&f.insecureCookies, "gateway-insecure-cookies", false, "the gateway is served over plain HTTP on loopback: the dashboard's cookie goes without Secure (needs a loopback --gateway-addr; paddock up sets it for its loopback gateway)")
	fs.IntVar(&f.maxMCP, "gateway-max-mcp-sessions", 8, "MCP sessions one token may hold open on this gateway")
	fs.IntVar(&f.maxNamed, "gateway-max-named-sessions", 16, "named sessions (?session=, \"session\") one tenant may hold")
	fs.StringVar(&f.operatorTokenFile, "gateway-operator-token-file", "", "`file` (0600) holding the operator's bearer token (32+ characters): it opens the operator fleet page (GET /v1/operator/fleet, the dashboard's) and nothing else; empty: no operator page")
	fs.StringVar(&f.operatorCreds, "gateway-operator-creds", "", "admin user's credentials `file` the operator page reads the streams' leaders with (opt-in: the gateway then holds an admin user; empty: no stream view)")
	fs.StringVar(&f.systemCreds, "gateway-system-creds", "", "system account user's credentials `file` the operator page pings the NATS servers with (opt-in; empty: no server list)")
}

func (f *gatewayFlags) config() (gateway.Config, error) {
	cfg := gateway.Config{Rate: f.rate, Burst: f.burst, MaxStreams: f.maxStreams, MaxBodyBytes: f.maxBody,
		HealMode: job.HealMode(f.heal), AnswerChars: f.answer, SessionIdleTTL: f.sessionIdle, SessionMaxBytes: f.sessionMaxBytes,
		AuthFailRate: f.failRate, AuthFailBurst: f.failBurst, MaxMCPSessions: f.maxMCP, MaxNamedSessions: f.maxNamed,
		InsecureCookies: f.insecureCookies}
	var err error
	if cfg.TrustedProxies, err = gateway.ParseTrustedProxies(f.trustedProxies); err != nil {
		return cfg, fmt.Errorf("--gateway-trusted-proxies: %w", err)
	}
	// gateway.Listen checks this too; here it is said in the flags' words,
	// before anything is dialed.
	if f.insecureCookies && f.addr != "off" && !gateway.LoopbackAddr(f.addr) {
		return cfg, fmt.Errorf("--gateway-insecure-cookies: the gateway listens on %s, not on loopback: serve it over TLS (or behind a TLS proxy in --gateway-trusted-proxies) and leave the cookies Secure", f.addr)
	}
	return cfg, nil
}

func gatewayCmd(g *globals) *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Serve the HTTP API (/v1), the MCP server (/mcp, one bash tool) and agent sessions to bearer-token clients",
		Long: `gateway authenticates bearer tokens (paddock tenant token NAME) and acts as the
token's tenant with that tenant's own NATS permissions, through users it mints with
its scoped signing key. It keeps no state: run several behind a load balancer (an
MCP session stays on the gateway that opened it). It needs the gateway service
credentials (--creds, default <data-dir>/auth/creds/gateway.creds) and the signing
key (--gateway-signing-key). docs/gateway.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			creds := g.auth.creds
			if creds == "" {
				creds = g.localCreds("gateway")
			}
			if creds == "" {
				return errors.New("no gateway credentials: give --creds FILE (a gateway service user's), or run `paddock up` on this machine first (it writes <data-dir>/auth/creds/gateway.creds)")
			}
			if f.signingKey == "" {
				f.signingKey = filepath.Join(g.authDir(), "gateway.nk")
			}
			stop, url, err := startGateway(cmd.Context(), g, &f, creds, g.logger)
			if err != nil {
				return err
			}
			defer stop()
			fmt.Fprintf(g.stderr, "paddock: gateway on %s (HTTP API %s/v1, MCP %s/mcp)\n", url, url, url)
			<-cmd.Context().Done()
			return nil
		},
	}
	f.register(cmd.Flags())
	registerReplicas(cmd.Flags(), g)
	return cmd
}

// startGateway serves a gateway on f.addr with the gateway service user's
// creds and the signing key f.signingKey, until the function it returns is
// called; it returns the gateway's base URL.
func startGateway(ctx context.Context, g *globals, f *gatewayFlags, creds string, log *slog.Logger) (stop func(), url string, err error) {
	b, err := os.ReadFile(creds)
	if err != nil {
		return nil, "", fmt.Errorf("--creds: %w", err)
	}
	if _, err := tenant.UserOfCreds(b); err != nil {
		return nil, "", fmt.Errorf("--creds %s: %w", creds, err)
	}
	nc, err := client.Connect(ctx, client.ConnectConfig{URL: g.natsURL, Name: "paddock-gateway", Creds: creds,
		TLSCA: g.auth.tlsCA, TLSCert: g.auth.tlsCert, TLSKey: g.auth.tlsKey, Logger: log,
		Options: []nats.Option{nats.CustomInboxPrefix(tenant.GatewayInboxPrefix)}})
	if err != nil {
		return nil, "", err
	}
	cfg, err := gatewayConfig(ctx, g, f, nc, log)
	if err == nil {
		var run *gateway.Running
		if run, err = gateway.Listen(ctx, cfg); err == nil {
			// The gateway first (gateway.Running.Stop), then the service
			// connection its tokens, registry and sessions are read through.
			return func() { run.Stop(); nc.Close() }, run.URL(), nil
		}
	}
	nc.Close()
	return nil, "", err
}

// gatewayConfig is the gateway's ServeConfig on the service connection
// nc: tokens and the registry read as the gateway, sessions in their KV
// bucket, tenants reached through users the gateway's key signs in each
// tenant's account (named by its registry record).
func gatewayConfig(ctx context.Context, g *globals, f *gatewayFlags, nc *nats.Conn, log *slog.Logger) (gateway.ServeConfig, error) {
	sc := gateway.ServeConfig{Addr: f.addr}
	js, err := jetstream.New(nc)
	if err != nil {
		return sc, err
	}
	reg, err := tenant.NewRegistry(ctx, js)
	if err != nil {
		return sc, fmt.Errorf("tenant registry: %w", err)
	}
	minter, err := tenant.LoadMinter(reg.Accounts(), f.signingKey, tenant.MinterConfig{TTL: f.mintTTL})
	if err != nil {
		return sc, fmt.Errorf("gateway signing key: %w", err)
	}
	toks, err := tenant.NewTokens(ctx, js, reg)
	if err != nil {
		return sc, err
	}
	if sc.Gateway, err = f.config(); err != nil {
		return sc, err
	}
	if err := gateway.EnsureSessionBucket(ctx, js, g.replicas); err != nil {
		return sc, replicasHint(err, g.replicas)
	}
	if sc.Gateway.Sessions, err = gateway.NewKVSessions(ctx, js); err != nil {
		return sc, err
	}
	sc.Gateway.Auth, sc.Gateway.Logger = tokenAuth(toks), log
	sc.Dial = func(ctx context.Context, t string) (*nats.Conn, error) {
		return client.Connect(ctx, client.ConnectConfig{URL: g.natsURL, Name: "paddock-gateway:" + t, Tenant: t,
			TLSCA: g.auth.tlsCA, TLSCert: g.auth.tlsCert, TLSKey: g.auth.tlsKey, Logger: log,
			Options: []nats.Option{minter.Option(t)}})
	}
	return sc, dashboardHooks(ctx, g, f, js, &sc.Gateway, log) // dashboard.go: traces and the fleet views
}

// tokenAuth authenticates bearer tokens with the token store. It is
// wiring: the gateway may import only client and job, tenant only job.
func tokenAuth(toks *tenant.Tokens) gateway.Authenticator {
	return gateway.AuthFunc(func(ctx context.Context, bearer string) (gateway.Identity, error) {
		t, err := toks.Verify(ctx, bearer)
		if errors.Is(err, tenant.ErrBadToken) {
			return gateway.Identity{}, fmt.Errorf("%w: %w", gateway.ErrUnauthorized, err)
		}
		if err != nil {
			return gateway.Identity{}, err
		}
		return gateway.Identity{Tenant: t.Tenant, TokenID: t.ID}, nil
	})
}

// mcpCmd is `paddock mcp`: the MCP server over stdio for a desktop agent,
// as the CLI's tenant (its credentials, no token); one process is one
// session, whose workspace is deleted when the process ends.
func mcpCmd(g *globals) *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the MCP server (one bash tool) over stdio, for a desktop agent, as your tenant",
		Long: `mcp speaks MCP on stdin and stdout, as the tenant of your credentials (the dev
tenant of a local 'paddock up' by default). The session's /workspace persists across
the agent's commands and is deleted when mcp exits. Logs go to stderr.
  (an MCP client config: command "paddock", args ["mcp"])
docs/gateway.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			nc, tn, err := g.connectClient(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := client.New(nc, client.Config{Tenant: tn, Logger: g.logger})
			if err != nil {
				return err
			}
			defer c.Close()
			cfg, err := f.config()
			if err != nil {
				return err
			}
			cfg.Logger = g.logger
			gw, err := gateway.NewStdio(tn, c, cfg)
			if err != nil {
				return err
			}
			return gw.ServeStdio(ctx, gateway.Identity{Tenant: tn, TokenID: "stdio"})
		},
	}
	f.register(cmd.Flags())
	for _, name := range []string{"gateway-addr", "gateway-signing-key", "gateway-rate", "gateway-burst", "gateway-max-streams", "gateway-max-body-bytes", "gateway-identity-ttl",
		"gateway-auth-fail-rate", "gateway-auth-fail-burst", "gateway-trusted-proxies", "gateway-insecure-cookies", "gateway-max-mcp-sessions", "gateway-max-named-sessions",
		"gateway-operator-token-file", "gateway-operator-creds", "gateway-system-creds"} {
		_ = cmd.Flags().MarkHidden(name)
	}
	return cmd
}

// startUpGateway runs `paddock up`'s gateway, unless --gateway-addr is
// off: it makes sure the running NATS server has the account with the
// gateway's signing key, that the tokens bucket exists, and that the dev
// tenant has a token in <data-dir>/auth/dev.token (0600), then serves.
func startUpGateway(ctx context.Context, g *globals, f *upFlags, log *slog.Logger) (stop func(), err error) {
	if f.gf.addr == "off" {
		return func() {}, nil
	}
	if f.auth.AccountChanged {
		if err := f.auth.Authority.PushAccountWith(ctx, g.dialAdmin, f.auth.Dir); err != nil {
			return nil, fmt.Errorf("push the account with the gateway key: %w", err)
		}
	}
	tokenFile := filepath.Join(f.auth.Dir, "dev.token")
	if err := ensureDevToken(ctx, g, f.auth.AdminCreds, tokenFile); err != nil {
		return nil, err
	}
	if f.gf.signingKey == "" {
		f.gf.signingKey = f.auth.GatewayKey
	}
	// paddock up's gateway is the local stack's, on plain HTTP: on a
	// loopback address it says so, and the dashboard's cookie goes without
	// Secure (a browser would not send it back over http://127.0.0.1).
	if gateway.LoopbackAddr(f.gf.addr) {
		f.gf.insecureCookies = true
	}
	stop, url, err := startGateway(ctx, g, &f.gf, f.auth.GatewayCreds, log)
	if err != nil {
		return nil, err
	}
	f.gatewayURL = url
	if fileExists(tokenFile) {
		fmt.Fprintf(g.stderr, "paddock: gateway on %s — HTTP API %s/v1, MCP %s/mcp; dev's bearer token is in %s\n", url, url, url, tokenFile)
	} else {
		fmt.Fprintf(g.stderr, "paddock: gateway on %s — HTTP API %s/v1, MCP %s/mcp; get a token with: paddock tenant token NAME\n", url, url, url)
	}
	return stop, nil
}

// ensureDevToken keeps a working bearer token of the dev tenant in path,
// as the admin (devstack.EnsureDevToken).
func ensureDevToken(ctx context.Context, g *globals, adminCreds, path string) error {
	return withAdminAs(ctx, g, adminCreds, "", func(ad *tenant.Admin) error {
		toks, err := ad.Tokens(ctx) // creates the bucket the gateway reads
		if err != nil {
			return err
		}
		return devstack.EnsureDevToken(ctx, toks, ad.Registry(), path)
	})
}
