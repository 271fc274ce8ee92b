// Package gateway serves Paddock to agents and to plain HTTP clients: an
// HTTP API under /v1 (http.go, documented by openapi.json), an MCP server
// with exactly one tool, bash (mcp.go), and agent sessions whose workspace
// persists across commands (session.go).
//
// The gateway is a NATS client like any pipeline: it authenticates a bearer
// token, then acts through that tenant's own NATS identity (Clients), so
// the NATS server's permissions still decide what a request may touch. It
// keeps no state of its own: jobs and results live in NATS and Redis,
// sessions and dashboard logins in a NATS KV bucket, so several gateways
// may run behind a load balancer (MCP's streamable HTTP sessions, the
// per-address limit of failed credentials (guard.go) and the MCP session
// cap excepted: they are per process; see docs/gateway.md).
//
// Listen (serve.go) runs a Gateway on a TCP address and shuts it down in
// dependency order; NewStdio (stdio.go) builds one that serves a single
// tenant over stdio.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

var (
	// ErrUnauthorized is wrapped by an Authenticator's error for a missing,
	// unknown or revoked token (HTTP 401).
	ErrUnauthorized = errors.New("gateway: unauthorized")
	// ErrInvalidConfig is wrapped by New's errors.
	ErrInvalidConfig = errors.New("gateway: invalid config")
)

// Identity is who a request comes from.
type Identity struct {
	// Tenant is the tenant the bearer token belongs to.
	Tenant string
	// TokenID names the token (never its secret): rate limits and logs are
	// per token.
	TokenID string
	// Operator says the request came with the operator token
	// (Config.OperatorToken): it reaches the operator's pages only, and no
	// tenant's (Tenant is empty).
	Operator bool
}

// Authenticator maps a bearer token to its Identity. An unknown, malformed
// or revoked token is an error wrapping ErrUnauthorized; any other error is
// a failure of the token store (HTTP 503).
type Authenticator interface {
	Authenticate(ctx context.Context, bearer string) (Identity, error)
}

// AuthFunc is an Authenticator.
type AuthFunc func(ctx context.Context, bearer string) (Identity, error)

// Authenticate calls f.
func (f AuthFunc) Authenticate(ctx context.Context, bearer string) (Identity, error) {
	return f(ctx, bearer)
}

// Clients gives the client of a tenant, connected with that tenant's own
// NATS identity (Pool is the implementation the binary uses).
type Clients interface {
	Client(ctx context.Context, tenant string) (*client.Client, error)
}

// Config configures a Gateway. Auth, Clients and Sessions are required; a
// zero field of the rest takes its default, filled in withDefaults.
type Config struct {
	Auth     Authenticator
	Clients  Clients
	Sessions SessionStore
	// Logins keeps the dashboard's logins (login.go); default: Sessions
	// when it is a LoginStore (KVSessions and MemSessions are), else a
	// MemSessions of this process.
	Logins LoginStore

	// Logger defaults to slog.Default(), with component=gateway.
	Logger *slog.Logger

	// Rate and Burst bound the requests per second of one token (default
	// 20/s, burst 40); a request over it gets 429 with Retry-After.
	Rate  float64
	Burst int
	// MaxStreams bounds the event streams (SSE) one token holds open at
	// once (default 8).
	MaxStreams int
	// AuthFailRate and AuthFailBurst bound the failed credential checks of
	// one client address (default 1/s, burst 20): past them, a credential
	// from that address that did not succeed within the last hour gets 429
	// before it is looked up (guard.go).
	AuthFailRate  float64
	AuthFailBurst int
	// TrustedProxies are the addresses of reverse proxies whose
	// X-Forwarded-For (the client's address, for the guard) and
	// X-Forwarded-Proto (https, for the cookie) are believed. Empty: the
	// client is the connection's peer.
	TrustedProxies []netip.Prefix
	// InsecureCookies says the gateway is served over plain HTTP on
	// loopback (paddock up): the login cookie then goes without Secure,
	// unless the request came over TLS. Default false: Secure always.
	InsecureCookies bool
	// MaxMCPSessions bounds the MCP sessions one token holds open on this
	// gateway (default 8); MaxNamedSessions bounds the named sessions
	// (?session=, "session") one tenant holds in the session store
	// (default 16). Each session may hold a workspace of SessionMaxBytes.
	MaxMCPSessions   int
	MaxNamedSessions int
	// MaxBodyBytes bounds a request body (default 1 MiB; a job's inline
	// files are at most 128 KiB decoded).
	MaxBodyBytes int64
	// MaxWait bounds ?wait= and a bash call's wait for its result (default
	// 330 s: a job's 300 s plus the queue).
	MaxWait time.Duration

	// HealMode is the heal mode of jobs the gateway builds (bash calls) and
	// of API submissions that name none (default job.HealRules).
	HealMode job.HealMode
	// AnswerChars caps the output in a bash tool answer (default 10,000).
	AnswerChars int
	// SessionIdleTTL ends a session unused for that long (default 30 min);
	// SessionMaxBytes is the byte quota of its workspace (default 256 MiB).
	SessionIdleTTL  time.Duration
	SessionMaxBytes int64

	// Spans, optional, returns the spans of the traces of job id, of any
	// tenant (GET /v1/jobs/{id}/trace keeps only the caller's, and answers
	// only for a job the caller's list has); cmd reads the span file's
	// tail (telemetry.SpanTail). Without it the trace endpoint answers 503.
	Spans func(ctx context.Context, jobID string) ([]Span, error)
	// Fleet, optional, returns the fleet view of GET /v1/fleet as tenant
	// may see it: what is its own (its jobs by queue, its reasons over
	// time) and what is fleet-wide and anonymous (how many workers, their
	// capacity), never a host name, another tenant's name or another
	// tenant's counts. Its value is encoded as JSON. Without it the
	// endpoint answers 503.
	Fleet func(ctx context.Context, tenant string) (any, error)

	// OperatorToken, optional, is the operator's bearer token (at least 32
	// characters; `paddock gateway --gateway-operator-token-file`): it
	// opens the operator's pages (GET /v1/operator/fleet, the dashboard's
	// operator fleet page) and nothing else; a tenant's token gets 403
	// there. Empty: nobody is the operator, and the operator pages refuse
	// every token (403).
	OperatorToken string
	// OperatorFleet returns the operator's fleet view (it names hosts);
	// its value is encoded as JSON. Without it the operator page answers
	// 503.
	OperatorFleet func(ctx context.Context) (any, error)
}

func (c Config) withDefaults() (Config, error) {
	if c.Auth == nil || c.Clients == nil || c.Sessions == nil {
		return c, fmt.Errorf("%w: Auth, Clients and Sessions are required", ErrInvalidConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("component", "gateway")
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Burst, 40)
	def(&c.MaxStreams, 8)
	def(&c.AnswerChars, 10_000)
	def(&c.AuthFailBurst, 20)
	def(&c.MaxMCPSessions, 8)
	def(&c.MaxNamedSessions, 16)
	c.Rate = cmp.Or(c.Rate, 20)
	c.AuthFailRate = cmp.Or(c.AuthFailRate, 1)
	if c.Logins == nil {
		if ls, ok := c.Sessions.(LoginStore); ok {
			c.Logins = ls
		} else {
			c.Logins = NewMemSessions()
		}
	}
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, 1<<20)
	c.MaxWait = cmp.Or(c.MaxWait, 330*time.Second)
	c.HealMode = cmp.Or(c.HealMode, job.HealRules)
	c.SessionIdleTTL = cmp.Or(c.SessionIdleTTL, 30*time.Minute)
	c.SessionMaxBytes = cmp.Or(c.SessionMaxBytes, 256<<20)
	if c.Rate < 0 || c.Burst < 1 || c.MaxStreams < 1 || c.MaxBodyBytes < 1 || c.MaxWait < time.Second ||
		c.AnswerChars < 1000 || c.SessionIdleTTL < time.Minute || c.SessionMaxBytes < 1<<20 {
		return c, fmt.Errorf("%w: Rate, Burst, MaxStreams, MaxBodyBytes, MaxWait (≥1s), AnswerChars (≥1000), SessionIdleTTL (≥1m) and SessionMaxBytes (≥1 MiB) must be positive", ErrInvalidConfig)
	}
	if c.OperatorToken != "" && len(c.OperatorToken) < minOperatorToken {
		return c, fmt.Errorf("%w: OperatorToken must be at least %d characters", ErrInvalidConfig, minOperatorToken)
	}
	if c.AuthFailRate < 0 || c.AuthFailBurst < 1 || c.MaxMCPSessions < 1 || c.MaxNamedSessions < 1 {
		return c, fmt.Errorf("%w: AuthFailRate, AuthFailBurst, MaxMCPSessions and MaxNamedSessions must be positive", ErrInvalidConfig)
	}
	if c.SessionIdleTTL <= c.MaxWait {
		// Else the sweeper could end a session while its command still runs.
		return c, fmt.Errorf("%w: SessionIdleTTL (%s) must be longer than MaxWait (%s), the longest a command may take", ErrInvalidConfig, c.SessionIdleTTL, c.MaxWait)
	}
	switch c.HealMode {
	case job.HealOff, job.HealRules, job.HealLLM:
	default:
		return c, fmt.Errorf("%w: heal mode %q", ErrInvalidConfig, c.HealMode)
	}
	return c, nil
}

// Gateway serves the HTTP API and the MCP server.
type Gateway struct {
	cfg   Config
	log   *slog.Logger
	lim   *limiters
	guard *guard   // guard.go: failed credentials per client address
	mcps  mcpSlots // mcp.go: open MCP sessions per token
	sess  sessions // session.go: sweeper, watched MCP sessions
}

// New returns a Gateway; it starts nothing (Handler serves, Start runs the
// session sweeper).
func New(cfg Config) (*Gateway, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Gateway{cfg: cfg, log: cfg.Logger, lim: newLimiters(cfg.Rate, cfg.Burst, cfg.MaxStreams),
		guard: newGuard(cfg.AuthFailRate, cfg.AuthFailBurst)}, nil
}

// Handler serves the whole gateway: /v1/… (the HTTP API and its OpenAPI
// document), /mcp (MCP over streamable HTTP) and /healthz.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	g.routes(mux)
	mux.Handle("/mcp", g.mcpHTTP())
	g.uiRoutes(mux) // the dashboard: /, /ui/… (ui.go)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
