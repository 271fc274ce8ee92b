package devstack_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"

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
	na := devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}
	ns, err := devstack.StartNATS(devstack.NATSConfig{Addr: na, StoreDir: filepath.Join(dir, "nats")})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect("nats://" + na.String())
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.AccountInfo()
	assert.NoError(t, err, "JetStream is on")

	// The same port again: a clear error, not a hang.
	_, err = devstack.StartNATS(devstack.NATSConfig{Addr: na, StoreDir: filepath.Join(dir, "nats2")})
	assert.Error(t, err)

	ra := devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}
	rdb := redis.NewClient(&redis.Options{Addr: ra.String()})
	defer rdb.Close()
	r, err := devstack.StartRedis(context.Background(), devstack.RedisConfig{Addr: ra, Dir: filepath.Join(dir, "redis"),
		Ping: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	require.NoError(t, err)
	require.NoError(t, rdb.Set(context.Background(), "k", "v", 0).Err())
	policy, err := rdb.ConfigGet(context.Background(), "maxmemory-policy").Result()
	require.NoError(t, err)
	assert.Equal(t, "noeviction", policy["maxmemory-policy"])
	r.Stop()
	assert.Error(t, rdb.Ping(context.Background()).Err(), "stopped")
}

func TestStartRedisThatNeverAnswers(t *testing.T) {
	t.Parallel()
	ra := devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := devstack.StartRedis(ctx, devstack.RedisConfig{Addr: ra, Dir: t.TempDir(),
		Ping: func(context.Context) error { return fmt.Errorf("wrong password") }})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wrong password")
	assert.Contains(t, err.Error(), "redis.log")
}
