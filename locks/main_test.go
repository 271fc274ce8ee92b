package locks_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
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
	testsvc.Eventually(tb, within, 5*time.Millisecond, cond, "%s", msg)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// signalClient wraps the real client and reports what it saw: the first
// script call answered redis.Nil (an obtain refused: the lease is held)
// closes refused, and every call answered is counted in calls.
type signalClient struct {
	locks.RedisClient
	calls   atomic.Int64
	once    sync.Once
	refused chan struct{}
}

func newSignalClient(real locks.RedisClient) *signalClient {
	return &signalClient{RedisClient: real, refused: make(chan struct{})}
}

func (c *signalClient) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.saw(c.RedisClient.Eval(ctx, script, keys, args...))
}

func (c *signalClient) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.saw(c.RedisClient.EvalSha(ctx, sha1, keys, args...))
}

func (c *signalClient) saw(cmd *redis.Cmd) *redis.Cmd {
	c.calls.Add(1)
	if errors.Is(cmd.Err(), redis.Nil) {
		c.once.Do(func() { close(c.refused) })
	}
	return cmd
}

// pollSignal is a context that closes polled the second time its Err is
// asked: a wait loop that checks its context on every round has been
// refused once and has come back for another try.
type pollSignal struct {
	context.Context
	n      atomic.Int64
	polled chan struct{}
}

func newPollSignal(ctx context.Context) *pollSignal {
	return &pollSignal{Context: ctx, polled: make(chan struct{})}
}

func (c *pollSignal) Err() error {
	if c.n.Add(1) == 2 {
		close(c.polled)
	}
	return c.Context.Err()
}
