package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/paddockhq/paddock/client"
)

// ServeConfig configures Listen. Addr is required, and so is Dial unless
// Gateway.Clients is set.
type ServeConfig struct {
	// Addr is the TCP listen address, host:port (port 0: a free port).
	Addr string
	// Dial connects to NATS as a tenant. When set, the gateway reaches its
	// tenants through a Pool of its own (clients logging to
	// Gateway.Logger), which Stop closes; when nil, Gateway.Clients is
	// used, and closing it is the caller's.
	Dial Dialer
	// Gateway configures the Gateway served; its Clients may be nil when
	// Dial is set. InsecureCookies needs a loopback Addr (LoopbackAddr).
	Gateway Config
	// ShutdownTimeout bounds Stop's grace for the requests in flight and
	// for the ends of the MCP sessions (default 10 s).
	ShutdownTimeout time.Duration
}

// Running is a Gateway served on a TCP address (Listen) until Stop.
type Running struct {
	gw      *Gateway
	srv     *http.Server
	url     string
	pool    *Pool // nil when the Clients are the caller's
	log     *slog.Logger
	timeout time.Duration
	served  chan struct{} // closed when Serve returned
	stop    sync.Once
}

// Listen builds a Gateway from cfg, runs its session sweeper (Start),
// listens on cfg.Addr and serves the gateway's Handler there with
// NewServer's timeouts, until Stop. The errors of a bad cfg wrap
// ErrInvalidConfig.
func Listen(ctx context.Context, cfg ServeConfig) (*Running, error) {
	if cfg.Addr == "" || cfg.ShutdownTimeout < 0 {
		return nil, fmt.Errorf("%w: an Addr and a ShutdownTimeout ≥ 0 are required", ErrInvalidConfig)
	}
	if cfg.Gateway.InsecureCookies && !LoopbackAddr(cfg.Addr) {
		return nil, fmt.Errorf("%w: InsecureCookies on %s, not a loopback address: serve the gateway over TLS (or behind a TLS proxy in TrustedProxies) and leave the cookies Secure",
			ErrInvalidConfig, cfg.Addr)
	}
	r := &Running{timeout: cmp.Or(cfg.ShutdownTimeout, 10*time.Second), served: make(chan struct{})}
	if cfg.Dial != nil {
		r.pool = NewPool(cfg.Dial, client.Config{Logger: cfg.Gateway.Logger})
		cfg.Gateway.Clients = r.pool
	}
	gw, err := New(cfg.Gateway)
	if err == nil {
		err = gw.Start(ctx)
	}
	if err != nil {
		r.closePool()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		gw.Stop()
		r.closePool()
		return nil, fmt.Errorf("gateway: listen on %s: %w", cfg.Addr, err)
	}
	r.gw, r.log, r.url = gw, gw.log, "http://"+ln.Addr().String()
	r.srv = NewServer(ln.Addr().String(), gw.Handler())
	go func() {
		defer close(r.served)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("gateway stopped serving", "err", err)
		}
	}()
	return r, nil
}

// URL is the gateway's base URL, http://host:port (the API is under /v1,
// MCP at /mcp).
func (r *Running) URL() string { return r.url }

// Gateway is the Gateway served.
func (r *Running) Gateway() *Gateway { return r.gw }

// Stop shuts the gateway down and returns when it is down (or
// ShutdownTimeout passed). Idempotent.
//
// Shutdown order: stop taking requests, with a grace for those in
// flight, while the MCP sessions, which live in this process only, end
// and delete their workspaces (their event streams would hold the
// server's Shutdown otherwise); then stop the session sweeper; then close
// the tenants' connections (the Pool), which the requests and the
// sessions' ends were using. What the caller gave (the Authenticator, the
// session store and the connection under them) it closes after Stop.
func (r *Running) Stop() {
	r.stop.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- r.srv.Shutdown(ctx) }()
		if err := r.gw.CloseSessions(ctx); err != nil {
			r.log.Warn("gateway: MCP sessions not all ended; the sweeper deletes their workspaces later", "err", err)
		}
		if err := <-shut; err != nil {
			r.log.Warn("gateway: requests still in flight at shutdown are cut", "err", err)
			_ = r.srv.Close()
		}
		<-r.served
		r.gw.Stop()
		r.closePool()
	})
}

func (r *Running) closePool() {
	if r.pool != nil {
		r.pool.Close()
	}
}

// LoopbackAddr reports whether a listen address host:port is on loopback
// only ("localhost" or a loopback IP; an empty host listens everywhere).
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// ParseTrustedProxies parses Config.TrustedProxies from addresses (a
// single host: 192.0.2.7, ::1) and CIDRs (10.0.0.0/8).
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range list {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return nil, fmt.Errorf("gateway: trusted proxy %q is neither an address nor a CIDR", p)
			}
			pfx = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, pfx.Masked())
	}
	return out, nil
}
