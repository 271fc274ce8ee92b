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
// credentials, and a second Ensure on the same URLs uses them.
func TestEnsure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	au, err := devstack.LoadOrCreateAuth(dir)
	require.NoError(t, err)
	natsURL := "nats://" + devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}.String()
	redisURL, err := au.WithRedisAuth("redis://" + devstack.Addr{Host: "127.0.0.1", Port: freePort(t)}.String())
	require.NoError(t, err)
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	cfg := devstack.EnsureConfig{NATSURL: natsURL, RedisURL: redisURL, DataDir: dir, Auth: au,
		PingRedis: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}

	s, err := devstack.Ensure(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	require.NotNil(t, s.NATS, "nothing answered: NATS started")
	require.NotNil(t, s.Redis, "nothing answered: Redis started")
	assert.DirExists(t, filepath.Join(dir, "nats"))
	assert.DirExists(t, filepath.Join(dir, "redis"))
	nc, err := nats.Connect(natsURL, nats.UserCredentials(au.AdminCreds))
	require.NoError(t, err, "NATS trusts the stack's credentials")
	nc.Close()
	_, err = nats.Connect(natsURL, nats.NoReconnect())
	assert.Error(t, err, "and no one else")
	require.NoError(t, rdb.Ping(context.Background()).Err())

	again, err := devstack.Ensure(context.Background(), cfg)
	require.NoError(t, err)
	assert.Nil(t, again.NATS, "NATS answered: none started")
	assert.Nil(t, again.Redis, "Redis answered: none started")
	again.Stop() // stops nothing
	require.NoError(t, rdb.Ping(context.Background()).Err(), "the first Redis still serves")
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
