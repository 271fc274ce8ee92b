package devstack_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/devstack"
)

// Ensure starts NATS and Redis where none answer, with the stack's
// credentials, on free ports when the URLs say port 0, and a second Ensure
// on the URLs it gives back uses them.
func TestEnsure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	au, err := devstack.LoadOrCreateAuth(dir)
	require.NoError(t, err)
	redisURL, err := au.WithRedisAuth("redis://127.0.0.1:0")
	require.NoError(t, err)
	ping := func(ctx context.Context, url string) error {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return err
		}
		rdb := redis.NewClient(opts)
		defer rdb.Close()
		return rdb.Ping(ctx).Err()
	}
	cfg := devstack.EnsureConfig{NATSURL: "nats://127.0.0.1:0", RedisURL: redisURL, DataDir: dir, Auth: au, PingRedis: ping}

	s, err := devstack.Ensure(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	require.NotNil(t, s.NATS, "nothing answered: NATS started")
	require.NotNil(t, s.Redis, "nothing answered: Redis started")
	assert.NotContains(t, s.NATSURL, ":0", "the NATS URL names the port picked")
	assert.NotEqual(t, redisURL, s.RedisURL, "the Redis URL names the port picked")
	assert.Contains(t, s.RedisURL, "paddock:", "and keeps its credentials")
	assert.DirExists(t, filepath.Join(dir, "nats"))
	assert.DirExists(t, filepath.Join(dir, "redis"))
	nc, err := nats.Connect(s.NATSURL, nats.UserCredentials(au.AdminCreds))
	require.NoError(t, err, "NATS trusts the stack's credentials")
	nc.Close()
	_, err = nats.Connect(s.NATSURL, nats.NoReconnect())
	assert.Error(t, err, "and no one else")
	require.NoError(t, ping(context.Background(), s.RedisURL))

	cfg.NATSURL, cfg.RedisURL = s.NATSURL, s.RedisURL
	again, err := devstack.Ensure(context.Background(), cfg)
	require.NoError(t, err)
	assert.Nil(t, again.NATS, "NATS answered: none started")
	assert.Nil(t, again.Redis, "Redis answered: none started")
	assert.Equal(t, s.NATSURL, again.NATSURL)
	assert.Equal(t, s.RedisURL, again.RedisURL)
	again.Stop() // stops nothing
	require.NoError(t, ping(context.Background(), s.RedisURL), "the first Redis still serves")
}

func TestWithRedisAuth(t *testing.T) {
	t.Parallel()
	au, err := devstack.LoadOrCreateAuth(t.TempDir())
	require.NoError(t, err)
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6390":       au.RedisURL(devstack.Addr{Host: "127.0.0.1", Port: 6390}),
		"redis://localhost":            au.RedisURL(devstack.Addr{Host: "localhost", Port: 6379}),
		"redis://u:pw@127.0.0.1:6390":  "redis://u:pw@127.0.0.1:6390",
		"unix:///run/redis/redis.sock": "unix:///run/redis/redis.sock",
	} {
		got, err := au.WithRedisAuth(raw)
		if assert.NoError(t, err, raw) {
			assert.Equal(t, want, got, raw)
		}
	}
	_, err = au.WithRedisAuth("redis://h:99999")
	assert.Error(t, err)
}
