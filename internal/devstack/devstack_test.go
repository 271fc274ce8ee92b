package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/devstack"
)

func TestParseAddr(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"nats://127.0.0.1:4333":                  "127.0.0.1:4333",
		"nats://u:p%40ss@10.0.0.1:4333,nats://x": "10.0.0.1:4333",
		"localhost":                              "localhost:4222",
		"tls://[::1]:7422":                       "[::1]:7422",
		"redis://:secret@127.0.0.1:6390/2":       "127.0.0.1:6390",
		"rediss://user:pw@cache":                 "cache:4222",
		"nats://:4999":                           "127.0.0.1:4999",
	} {
		a, err := devstack.ParseAddr(raw, 4222)
		if assert.NoError(t, err, raw) {
			assert.Equal(t, want, a.String(), raw)
		}
	}
	for _, raw := range []string{"nats://h:99999", "nats://h:port", "unix:///run/redis.sock", "redis://:pw@h:x"} {
		_, err := devstack.ParseAddr(raw, 6379)
		if assert.Error(t, err, raw) {
			assert.NotContains(t, err.Error(), "pw@", "credentials are redacted")
		}
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestStartNATSAndRedis(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ns, err := devstack.StartNATS(devstack.NATSConfig{Addr: devstack.Addr{Host: "127.0.0.1"}, StoreDir: filepath.Join(dir, "nats")})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	na := ns.Addr().(*net.TCPAddr)
	require.NotZero(t, na.Port, "port 0 picks a free port")
	nc, err := nats.Connect("nats://" + na.String())
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.AccountInfo()
	assert.NoError(t, err, "JetStream is on")

	// The same port again: a clear error, not a hang.
	_, err = devstack.StartNATS(devstack.NATSConfig{Addr: devstack.Addr{Host: "127.0.0.1", Port: na.Port}, StoreDir: filepath.Join(dir, "nats2")})
	assert.Error(t, err)

	var rdb *redis.Client
	r, err := devstack.StartRedis(context.Background(), devstack.RedisConfig{Addr: devstack.Addr{Host: "127.0.0.1"}, Dir: filepath.Join(dir, "redis"),
		Ping: func(ctx context.Context, a devstack.Addr) error {
			c := redis.NewClient(&redis.Options{Addr: a.String()})
			defer c.Close()
			return c.Ping(ctx).Err()
		}})
	require.NoError(t, err)
	require.NotZero(t, r.Addr().Port, "port 0 picks a free port")
	rdb = redis.NewClient(&redis.Options{Addr: r.Addr().String()})
	defer rdb.Close()
	require.NoError(t, rdb.Set(context.Background(), "k", "v", 0).Err())
	policy, err := rdb.ConfigGet(context.Background(), "maxmemory-policy").Result()
	require.NoError(t, err)
	assert.Equal(t, "noeviction", policy["maxmemory-policy"])
	r.Stop()
	assert.Error(t, rdb.Ping(context.Background()).Err(), "stopped")
}

// A port someone else holds: redis-server exits, and the error says the
// port is taken at once rather than after the 10 s wait for an answer.
func TestStartRedisOnATakenPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	ra := devstack.Addr{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second) // under await's own 10 s
	defer cancel()
	_, err = devstack.StartRedis(ctx, devstack.RedisConfig{Addr: ra, Dir: t.TempDir(),
		Ping: func(context.Context, devstack.Addr) error { return errors.New("no answer") }})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the port is taken")
	assert.Contains(t, err.Error(), "exited")
	assert.NoError(t, ctx.Err(), "it knew before the wait ran out")
}

func TestStartRedisThatNeverAnswers(t *testing.T) {
	t.Parallel()
	ra := devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := devstack.StartRedis(ctx, devstack.RedisConfig{Addr: ra, Dir: t.TempDir(),
		Ping: func(context.Context, devstack.Addr) error { return fmt.Errorf("wrong password") }})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wrong password")
	assert.Contains(t, err.Error(), "redis.log")
}
