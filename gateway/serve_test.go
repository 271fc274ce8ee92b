package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// bareServe is the ServeConfig of a gateway with the fleet's tokens but no
// fleet (bareGateway's), on a free loopback port.
func bareServe() ServeConfig {
	return ServeConfig{Addr: "127.0.0.1:0",
		Dial: func(ctx context.Context, tenant string) (*nats.Conn, error) {
			return nats.Connect("nats://127.0.0.1:1", nats.Timeout(time.Second), nats.CustomInboxPrefix(job.InboxPrefix(tenant)))
		},
		Gateway: Config{Auth: staticTokens(map[string]string{devToken: "dev"}), Sessions: NewMemSessions(),
			Logger: slog.New(slog.DiscardHandler)}}
}

func healthz(url string) error {
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// Listen serves until Stop, again and again; Stop is idempotent, and
// after it the address answers no more and the pool is closed.
func TestListenStopRepeatedly(t *testing.T) {
	t.Parallel()
	for range 3 {
		run, err := Listen(context.Background(), bareServe())
		require.NoError(t, err)
		require.NoError(t, healthz(run.URL()))
		run.Stop()
		run.Stop()
		assert.Error(t, healthz(run.URL()), "stopped: nothing listens")
		_, err = run.pool.Client(context.Background(), "dev")
		assert.ErrorContains(t, err, "pool is closed")
	}
}

// Listen refuses a bad ServeConfig before it listens, and says why.
func TestListenConfig(t *testing.T) {
	t.Parallel()
	for name, mod := range map[string]func(*ServeConfig){
		"no address":       func(c *ServeConfig) { c.Addr = "" },
		"no clients":       func(c *ServeConfig) { c.Dial = nil },
		"no sessions":      func(c *ServeConfig) { c.Gateway.Sessions = nil },
		"negative timeout": func(c *ServeConfig) { c.ShutdownTimeout = -time.Second },
		"insecure cookies off loopback": func(c *ServeConfig) {
			c.Addr, c.Gateway.InsecureCookies = "0.0.0.0:0", true
		},
	} {
		cfg := bareServe()
		mod(&cfg)
		_, err := Listen(context.Background(), cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	cfg := bareServe()
	cfg.Addr = "127.0.0.1:nope"
	_, err := Listen(context.Background(), cfg)
	assert.ErrorContains(t, err, "gateway: listen on 127.0.0.1:nope")

	// Clients of the caller's: used, and not closed by Stop.
	cfg = bareServe()
	pool := NewPool(cfg.Dial, client.Config{})
	cfg.Dial, cfg.Gateway.Clients, cfg.Gateway.InsecureCookies = nil, pool, true
	run, err := Listen(context.Background(), cfg)
	require.NoError(t, err)
	run.Stop()
	_, err = pool.Client(context.Background(), "dev")
	assert.NotContains(t, err.Error(), "pool is closed", "the caller's pool stays open")
	pool.Close()
}

func TestLoopbackAddr(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true, "127.0.0.2:1": true,
		"0.0.0.0:8080": false, ":8080": false, "192.0.2.1:80": false, "example.com:80": false, "127.0.0.1": false,
	} {
		assert.Equal(t, want, LoopbackAddr(addr), addr)
	}
}

func TestParseTrustedProxies(t *testing.T) {
	t.Parallel()
	got, err := ParseTrustedProxies([]string{"10.0.0.0/8", "192.0.2.7", "::1", "10.1.2.3/16", "::ffff:192.0.2.8"})
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.0.2.8/32")}, got)
	_, err = ParseTrustedProxies([]string{"10.0.0.0/8", "proxy.example"})
	assert.ErrorContains(t, err, `"proxy.example"`)
	got, err = ParseTrustedProxies(nil)
	require.NoError(t, err)
	assert.Empty(t, got)
}

// Stop on a real fleet: an MCP session with a workspace (and the SDK's
// event stream) open does not hold Stop, and its workspace is deleted
// and its record gone before Stop returns.
func TestListenStopEndsMCPSessions(t *testing.T) {
	t.Parallel()
	f := mcpFleet(t, nil)
	ctx := context.Background()
	natsURL := f.nc.ConnectedUrl()
	sessions, err := NewKVSessions(ctx, f.js)
	require.NoError(t, err)
	srv, err := Listen(ctx, ServeConfig{Addr: "127.0.0.1:0",
		Dial: func(ctx context.Context, tenant string) (*nats.Conn, error) {
			return nats.Connect(natsURL, nats.CustomInboxPrefix(job.InboxPrefix(tenant)))
		},
		Gateway: Config{Auth: staticTokens(map[string]string{devToken: "dev"}), Sessions: sessions}})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	cs := f.connectAt(srv.URL()+"/mcp", devToken)
	run(t, cs, "echo x > /workspace/f")
	file := f.volumeDir("dev", volumeOf(t, cs)) + "/f"
	require.FileExists(t, file)

	srv.Stop()
	assert.NoFileExists(t, file, "Stop ended the MCP session's workspace")
	_, err = sessions.Get(ctx, SessionRef{Tenant: "dev", Kind: SessionMCP, Name: cs.ID()})
	assert.ErrorIs(t, err, ErrNoSession)
}
