package broker

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// Limiter decides whether one more call fits a token bucket: rate limit,
// size burst, one bucket per key. The broker's key is "<grant>/<tenant>"
// (names that cannot hold a '/'): every job of a tenant draws on the same
// bucket of a grant, so a tenant cannot multiply a shared credential's
// rate by running more jobs, and it cannot use up another tenant's.
//
// The default (Config.Limiter nil) keeps the buckets in the broker's
// process: a fleet of N workers lets a tenant make up to N times a grant's
// rate. RedisLimiter keeps them in Redis, for the whole fleet.
type Limiter interface {
	// Allow takes a token from key's bucket if it has one; otherwise it
	// returns false and how long until one is back. An error means the
	// limiter could not decide: the broker refuses the call.
	Allow(ctx context.Context, key string, limit rate.Limit, burst int) (ok bool, retryAfter time.Duration, err error)
}

// localLimiter is the default Limiter: buckets in this process. The set of
// keys is bounded by the policies' grants and tenants (a call is counted
// only for a grant its tenant has).
type localLimiter struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*rate.Limiter
}

func newLocalLimiter(now func() time.Time) *localLimiter {
	return &localLimiter{now: now, m: map[string]*rate.Limiter{}}
}

func (l *localLimiter) Allow(_ context.Context, key string, limit rate.Limit, burst int) (bool, time.Duration, error) {
	l.mu.Lock()
	b := l.m[key]
	switch {
	case b == nil:
		b = rate.NewLimiter(limit, burst)
		l.m[key] = b
	case b.Limit() != limit || b.Burst() != burst: // the policy changed
		b.SetLimit(limit)
		b.SetBurst(burst)
	}
	l.mu.Unlock()
	now := l.now()
	r := b.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d, nil
	}
	return true, 0, nil
}

// RedisClient is the part of go-redis a RedisLimiter uses; *redis.Client,
// *redis.ClusterClient and *redis.Ring satisfy it.
type RedisClient interface {
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
}

var (
	//go:embed rate.lua
	rateLua    string
	rateScript = redis.NewScript(rateLua) // for its hash
)

// DefaultRatePrefix prefixes a RedisLimiter's keys when it is given none.
const DefaultRatePrefix = "paddock:broker:rate:"

// RedisLimiter is a Limiter shared by every worker of a fleet: each bucket
// is one Redis key, changed only by one atomic script (rate.lua) that
// reads the Redis server's clock.
type RedisLimiter struct {
	c      RedisClient
	prefix string
}

// NewRedisLimiter returns a RedisLimiter on c, its keys under prefix
// (default DefaultRatePrefix).
func NewRedisLimiter(c RedisClient, prefix string) *RedisLimiter {
	if prefix == "" {
		prefix = DefaultRatePrefix
	}
	return &RedisLimiter{c: c, prefix: prefix}
}

// Allow runs rate.lua on key's bucket, with a 5 s deadline if ctx has none.
func (l *RedisLimiter) Allow(ctx context.Context, key string, limit rate.Limit, burst int) (bool, time.Duration, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	// Microseconds between calls, at most a day (a slower rate gives a
	// bucket that outlives nothing useful, and keeps Lua's doubles exact).
	interval := int64(math.Min(math.Ceil(1e6/float64(limit)), 86400e6))
	keys := []string{l.prefix + key}
	cmd := l.c.EvalSha(ctx, rateScript.Hash(), keys, interval, burst)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = l.c.Eval(ctx, rateLua, keys, interval, burst)
	}
	res, err := cmd.Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("broker: rate limiter: %w", err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("broker: rate limiter: rate.lua answered %v", res)
	}
	return res[0] == 1, time.Duration(res[1]) * time.Microsecond, nil
}
