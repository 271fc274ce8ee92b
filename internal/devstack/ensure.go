package devstack

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/paddockhq/paddock/internal/redact"
)

// DefaultDataDir is where `paddock up` keeps its data when no directory
// is named: $XDG_STATE_HOME/paddock, else ~/.local/state/paddock.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "paddock")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "paddock")
	}
	return filepath.Join(home, ".local", "state", "paddock")
}

// WithRedisAuth is raw with au's Redis credentials when it names none: a
// redis:// or rediss:// URL without a user. Others are returned as they are.
func (au *Auth) WithRedisAuth(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return raw, nil
	}
	addr, err := ParseAddr(raw, 6379)
	if err != nil {
		return "", err
	}
	return au.RedisURL(addr), nil
}

// EnsureConfig is the NATS and Redis a dev stack needs.
type EnsureConfig struct {
	// NATSURL and RedisURL are where they are asked for, and where the
	// ones started listen; on port 0 a started one picks a free port, and
	// Services gives the URL with it.
	NATSURL, RedisURL string
	// DataDir holds the data of what is started (DataDir/nats, DataDir/redis).
	DataDir string
	// Auth is the stack's credentials (LoadOrCreateAuth): NATS is asked
	// with its admin creds, and what is started trusts it.
	Auth *Auth
	// PingRedis answers nil when Redis at url (RedisURL, or it with the
	// port picked) serves the caller (its client, its credentials).
	PingRedis func(ctx context.Context, url string) error
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Services are what Ensure started.
type Services struct {
	NATS  *server.Server // nil: one answered already
	Redis *Redis         // nil: one answered already
	// NATSURL and RedisURL are the config's URLs with the ports the
	// started servers listen on.
	NATSURL, RedisURL string
}

// Stop stops what Ensure started, Redis first.
func (s *Services) Stop() {
	if s.Redis != nil {
		s.Redis.Stop()
	}
	if s.NATS != nil {
		s.NATS.Shutdown()
		s.NATS.WaitForShutdown()
	}
}

// Ensure uses NATS and Redis where they answer at their URLs, and starts
// the ones that do not (StartNATS, StartRedis) on their URLs' addresses,
// with cfg.Auth's credentials and their data under cfg.DataDir.
func Ensure(ctx context.Context, cfg EnsureConfig) (*Services, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	ns, err := ensureNATS(cfg)
	if err != nil {
		return nil, err
	}
	s := &Services{NATS: ns, NATSURL: cfg.NATSURL, RedisURL: cfg.RedisURL}
	if ns != nil {
		s.NATSURL = withPort(cfg.NATSURL, ns.Addr().(*net.TCPAddr).Port)
	}
	if s.Redis, err = ensureRedis(ctx, cfg); err != nil {
		s.Stop()
		return nil, err
	}
	if s.Redis != nil {
		s.RedisURL = withPort(cfg.RedisURL, s.Redis.Addr().Port)
	}
	return s, nil
}

// ensureNATS returns nil when a NATS server answers at the URL to the
// admin credentials; otherwise it starts an embedded one.
func ensureNATS(cfg EnsureConfig) (*server.Server, error) {
	if nc, err := nats.Connect(cfg.NATSURL, nats.UserCredentials(cfg.Auth.AdminCreds), nats.Timeout(time.Second), nats.NoReconnect()); err == nil {
		nc.Close()
		cfg.Logger.Info("using NATS", "url", redact.URL(cfg.NATSURL))
		return nil, nil
	}
	addr, err := ParseAddr(cfg.NATSURL, 4222)
	if err != nil {
		return nil, fmt.Errorf("NATS URL: %w", err)
	}
	return StartNATS(NATSConfig{Addr: addr, StoreDir: filepath.Join(cfg.DataDir, "nats"), Auth: cfg.Auth.Authority, Logger: cfg.Logger})
}

// ensureRedis returns nil when Redis answers at the URL; otherwise it
// starts a redis-server child.
func ensureRedis(ctx context.Context, cfg EnsureConfig) (*Redis, error) {
	if err := cfg.PingRedis(ctx, cfg.RedisURL); err == nil {
		cfg.Logger.Info("using Redis", "url", redact.URL(cfg.RedisURL))
		return nil, nil
	}
	addr, err := ParseAddr(cfg.RedisURL, 6379)
	if err != nil {
		return nil, fmt.Errorf("redis URL: %w", err)
	}
	r, err := StartRedis(ctx, RedisConfig{Addr: addr, Dir: filepath.Join(cfg.DataDir, "redis"), Logger: cfg.Logger,
		User: cfg.Auth.RedisUser, Password: cfg.Auth.RedisPassword,
		Ping: func(ctx context.Context, a Addr) error { return cfg.PingRedis(ctx, withPort(cfg.RedisURL, a.Port)) }})
	if err != nil {
		return nil, fmt.Errorf("no Redis at %s, and %w", redact.URL(cfg.RedisURL), err)
	}
	return r, nil
}

// withPort is raw, a URL (or a list of them: the first one's server was
// started) with its first server's port set to port. It is raw unchanged
// when that port is set already.
func withPort(raw string, port int) string {
	first, _, _ := strings.Cut(raw, ",")
	first = strings.TrimSpace(first)
	if !strings.Contains(first, "://") {
		first = "nats://" + first
	}
	u, err := url.Parse(first)
	if err != nil || u.Port() == strconv.Itoa(port) {
		return raw
	}
	u.Host = net.JoinHostPort(cmp.Or(u.Hostname(), "127.0.0.1"), strconv.Itoa(port))
	return u.String()
}
