package locks_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/locks"
)

func TestMain(m *testing.M) {
	// Re-executed as a helper process by the multi-process tests.
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	goleak.VerifyTestMain(m)
}

// setup is one test's private Redis server, a client of it, and a Leaser
// with a key prefix unique to the test.
type setup struct {
	redis  *testsvc.Redis
	rdb    *redis.Client
	leaser *locks.Leaser
	prefix string
	log    *slog.Logger
}

func newSetup(tb testing.TB) *setup {
	tb.Helper()
	s := &setup{redis: testsvc.StartRedis(tb), prefix: testsvc.Unique("paddock:test:") + ":"}
	s.rdb = redis.NewClient(redisOptions(s.redis.Addr))
	tb.Cleanup(func() { s.rdb.Close() })
	s.log = testLogger(tb)
	s.leaser = s.newLeaser(tb, s.rdb)
	return s
}

// redisOptions are the client options the tests (and the helper processes)
// use: deadlines on contexts reach the socket, as the worker should set.
func redisOptions(addr string) *redis.Options {
	return &redis.Options{Network: "unix", Addr: addr, ContextTimeoutEnabled: true}
}

func testLogger(tb testing.TB) *slog.Logger {
	if _, ok := tb.(*testing.B); ok {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newLeaser returns a Leaser on rdb (the setup's client, or a wrapper of it)
// with the setup's prefix.
func (s *setup) newLeaser(tb testing.TB, rdb locks.RedisClient) *locks.Leaser {
	tb.Helper()
	l, err := locks.NewLeaser(rdb, locks.LeaseConfig{Prefix: s.prefix, Logger: s.log})
	require.NoError(tb, err)
	return l
}

// guard returns a Guard on a fresh root (unless cfg.Root is set) with the
// setup's Leaser.
func (s *setup) guard(tb testing.TB, cfg locks.GuardConfig) *locks.Guard {
	tb.Helper()
	if cfg.Root == "" {
		cfg.Root = tb.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	g, err := locks.NewGuard(s.leaser, cfg)
	require.NoError(tb, err)
	return g
}

// leaseOwner returns the value of resource's lease key ("" when absent).
func (s *setup) leaseOwner(tb testing.TB, resource string) string {
	tb.Helper()
	key, _ := s.leaser.KeysForTest(resource)
	v, err := s.rdb.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return ""
	}
	require.NoError(tb, err)
	return v
}

// eventually polls cond every few milliseconds until it holds or the
// (generous) deadline passes.
func eventually(tb testing.TB, within time.Duration, cond func() bool, msg string) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %s: %s", within, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
