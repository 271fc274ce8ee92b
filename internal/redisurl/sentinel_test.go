package redisurl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/redisurl"
	"github.com/paddockhq/paddock/internal/testsvc"
)

// incr is a script the new primary has never seen: its first EVALSHA
// there answers NOSCRIPT, and Script.Run must fall back to EVAL.
var incr = redis.NewScript(`return redis.call("INCR", KEYS[1])`)

// The client of a redis+sentinel:// URL follows a failover without being
// rebuilt: writes before and after the primary's SIGKILL go through the
// same *redis.Client, and a Lua script runs on the promoted replica.
func TestFailoverClientFollowsThePromotion(t *testing.T) {
	ha := testsvc.StartRedisHA(t, testsvc.RedisHAConfig{Auth: true})
	u, err := redisurl.Parse("--redis-url", ha.URL())
	require.NoError(t, err)
	u.SetTimeouts(time.Second, time.Second, time.Second)
	rdb := u.NewClient()
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, incr.Run(ctx, rdb, []string{"n"}).Err())
	// WAIT: the replica has the write before the primary dies.
	require.NoError(t, rdb.Do(ctx, "WAIT", 1, 5000).Err())

	old := ha.Primary(ctx)
	old.Kill()
	newAddr := ha.WaitMaster(old.Addr(), 30*time.Second)
	assert.NotEqual(t, old.Addr(), newAddr)

	var n int64
	testsvc.Eventually(t, 20*time.Second, 100*time.Millisecond, func() bool {
		n, err = incr.Run(ctx, rdb, []string{"n"}).Int64()
		return err == nil
	}, "a write through the same client after the failover (last error: %v)", err)
	assert.Equal(t, int64(2), n, "the replicated write survived, the script ran on the new primary")

	// The old primary comes back and the set is whole again: one master,
	// the other node replicating from it, and the count kept.
	ha.Restart(old)
	master := ha.WaitConverged(time.Minute)
	c := redis.NewClient(&redis.Options{Addr: master, Username: ha.User, Password: ha.Password})
	defer c.Close()
	got, err := c.Get(ctx, "n").Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(2), got, "the write made after the failover is on the master the set converged on")
}

// Sentinels that monitor no master of the URL's name say so, naming the
// ones they do monitor; Sentinels that do not answer say that.
func TestDiagnoseNamesTheProblem(t *testing.T) {
	ha := testsvc.StartRedisHA(t, testsvc.RedisHAConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	wrong := strings.Replace(ha.URL(), "/"+ha.Master, "/nosuchmaster", 1)
	u, err := redisurl.Parse("--redis-url", wrong)
	require.NoError(t, err)
	err = u.Diagnose(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, redisurl.ErrUnknownMaster)
	var se *redisurl.SentinelError
	require.True(t, errors.As(err, &se))
	assert.Len(t, se.Answers, 3)
	assert.Contains(t, err.Error(), `does not know master "nosuchmaster"`)
	assert.Contains(t, err.Error(), ha.Master, "names the masters it monitors")

	// The real master: nothing to report.
	u, err = redisurl.Parse("--redis-url", ha.URL())
	require.NoError(t, err)
	assert.NoError(t, u.Diagnose(ctx))

	// No Sentinel listens.
	for _, s := range ha.Sentinels {
		s.Kill()
	}
	err = u.Diagnose(ctx)
	assert.ErrorIs(t, err, redisurl.ErrNoSentinel)
	assert.Contains(t, err.Error(), "connect")
}

// Sentinels with a password of their own: the URL's sentinel_password
// reaches them, and a URL without it is told what to add.
func TestSentinelsWithTheirOwnPassword(t *testing.T) {
	ha := testsvc.StartRedisHA(t, testsvc.RedisHAConfig{Auth: true, SentinelAuth: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := redisurl.Parse("--redis-url", ha.URL())
	require.NoError(t, err)
	require.NoError(t, u.Diagnose(ctx))
	rdb := u.NewClient()
	defer rdb.Close()
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	got, err := rdb.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)

	bare, _, _ := strings.Cut(ha.URL(), "?")
	u, err = redisurl.Parse("--redis-url", bare)
	require.NoError(t, err)
	err = u.Diagnose(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, redisurl.ErrSentinelAuth)
	assert.Contains(t, err.Error(), "?sentinel_password=")
	assert.NotContains(t, err.Error(), ha.SentinelPassword)
	nopw := u.NewClient()
	defer nopw.Close()
	assert.Error(t, nopw.Set(ctx, "k", "w", 0).Err(), "a client without the Sentinels' password reached the master")
}
