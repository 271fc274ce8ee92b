package locks

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClient is the part of go-redis the Leaser uses. *redis.Client,
// *redis.ClusterClient and *redis.Ring satisfy it; tests wrap one to inject
// faults.
type RedisClient interface {
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
)

var (
	//go:embed obtain.lua
	obtainLua string
	//go:embed refresh.lua
	refreshLua string
	//go:embed release.lua
	releaseLua string

	obtainScript  = newScript(obtainLua)
	refreshScript = newScript(refreshLua)
	releaseScript = newScript(releaseLua)
)

// Defaults of LeaseConfig, and the shortest ttl Obtain accepts.
const (
	DefaultPrefix    = "paddock:lock:"
	DefaultOpTimeout = 5 * time.Second
	MinTTL           = 10 * time.Millisecond
)

// LeaseConfig tunes a Leaser; a zero field means its default.
type LeaseConfig struct {
	// Prefix of every key (default "paddock:lock:"). A resource r uses
	// <Prefix>{r} for the lease and <Prefix>{r}:fence for its fencing
	// counter; the braces keep both in one Redis Cluster slot.
	Prefix string

	// PollMin and PollMax bound the jittered, doubling interval at which
	// Obtain retries a held lease (default 5 ms and 100 ms).
	PollMin, PollMax time.Duration

	// OpTimeout is the deadline applied to a Redis call whose context has
	// none (default 5 s). Obtain's default deadline is its wait plus this.
	OpTimeout time.Duration

	// Logger receives watchdog events (default slog.Default()).
	Logger *slog.Logger
}

// Leaser obtains fenced Redis leases. It is safe for concurrent use.
type Leaser struct {
	rdb RedisClient
	cfg LeaseConfig
	log *slog.Logger
}

// NewLeaser returns a Leaser using rdb. Config errors wrap ErrInvalid.
func NewLeaser(rdb RedisClient, cfg LeaseConfig) (*Leaser, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalid)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	cfg.PollMin = cmp.Or(cfg.PollMin, defaultPollMin)
	cfg.PollMax = cmp.Or(cfg.PollMax, defaultPollMax)
	cfg.OpTimeout = cmp.Or(cfg.OpTimeout, DefaultOpTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.PollMin < 0 || cfg.PollMax < cfg.PollMin:
		return nil, fmt.Errorf("%w: lease poll interval %s..%s", ErrInvalid, cfg.PollMin, cfg.PollMax)
	case cfg.OpTimeout < 0:
		return nil, fmt.Errorf("%w: lease op timeout %s", ErrInvalid, cfg.OpTimeout)
	}
	return &Leaser{rdb: rdb, cfg: cfg, log: cfg.Logger.With("component", "locks.lease")}, nil
}

// Lease is a held Redis lease with its fencing token. A watchdog goroutine
// refreshes it every ttl/3 until Release, or until it is lost.
type Lease struct {
	leaser   *Leaser
	resource string
	key      string
	owner    string // the random owner token: the lease key's value
	token    int64  // the fencing token
	ttl      time.Duration

	lost chan struct{} // closed by the watchdog when the lease is lost
	mu   sync.Mutex
	err  *LostError // why; set before lost is closed

	stop     chan struct{} // closed by Release to end the watchdog
	done     chan struct{} // closed when the watchdog has returned
	stopOnce sync.Once

	relMu    sync.Mutex
	released bool
}

// Obtain takes the lease on resource for ttl, retrying while someone else
// holds it for up to wait (0 or NoWait: a single attempt). On success the
// fencing counter of resource is incremented in the same atomic step, and
// the lease carries the new value: every holder of a resource gets a
// strictly greater token than all before it.
//
// A lease still held by another owner after wait returns a *TimeoutError
// wrapping ErrNotObtained (and ctx's error when ctx ended first). Redis
// errors are returned as they are: infrastructure, worth a retry.
func (l *Leaser) Obtain(ctx context.Context, resource string, ttl, wait time.Duration) (*Lease, error) {
	return l.obtain(ctx, resource, ttl, wait, 0)
}

// obtain is Obtain with a floor for the fencing counter (see obtain.lua).
func (l *Leaser) obtain(ctx context.Context, resource string, ttl, wait time.Duration, floor int64) (*Lease, error) {
	switch {
	case resource == "":
		return nil, fmt.Errorf("%w: empty lease resource", ErrInvalid)
	case ttl < MinTTL:
		return nil, fmt.Errorf("%w: lease ttl %s is below %s", ErrInvalid, ttl, MinTTL)
	}
	wait = max(wait, 0)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+l.cfg.OpTimeout)
		defer cancel()
	}
	owner, err := newOwner()
	if err != nil {
		return nil, err
	}
	key, fenceKey := l.keys(resource)
	start := time.Now()
	deadline := start.Add(wait)
	poll := newBackoff(l.cfg.PollMin, l.cfg.PollMax)
	for {
		// The ttl starts on the server after this instant: measuring from
		// here errs on the safe side.
		sent := time.Now()
		res, err := obtainScript.run(ctx, l.rdb, []string{key, fenceKey}, owner, ttl.Milliseconds(), floor).Slice()
		switch {
		case err == nil:
			token, raised, err := parseObtain(res)
			if err != nil {
				l.abandon(key, owner)
				return nil, fmt.Errorf("locks: obtain lease %s: %w", resource, err)
			}
			if raised {
				l.log.Warn("fencing counter was behind the storage's highest token (Redis lost data?); raised it",
					"resource", resource, "floor", floor, "token", token)
			}
			ls := &Lease{
				leaser: l, resource: resource, key: key, owner: owner, token: token, ttl: ttl,
				lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
			}
			go ls.watch(sent)
			return ls, nil
		case !errors.Is(err, redis.Nil):
			// The script may have run with only its reply lost: remove a
			// lease we might own rather than block the resource for a ttl.
			l.abandon(key, owner)
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, &TimeoutError{Lock: "lease", Name: resource, Waited: time.Since(start), Cause: ctxErr}
			}
			return nil, fmt.Errorf("locks: obtain lease %s: %w", resource, err)
		}
		now := time.Now()
		if !now.Before(deadline) {
			return nil, &TimeoutError{Lock: "lease", Name: resource, Waited: now.Sub(start)}
		}
		if err := sleep(ctx, min(poll.next(), deadline.Sub(now))); err != nil {
			return nil, &TimeoutError{Lock: "lease", Name: resource, Waited: time.Since(start), Cause: err}
		}
	}
}

// abandon deletes the lease key if it holds owner, best effort, on a
// detached context with its own short deadline.
func (l *Leaser) abandon(key, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(l.cfg.OpTimeout, time.Second))
	defer cancel()
	_ = releaseScript.run(ctx, l.rdb, []string{key}, owner).Err()
}

func (l *Leaser) keys(resource string) (lease, fence string) {
	lease = l.cfg.Prefix + "{" + resource + "}"
	return lease, lease + ":fence"
}

func parseObtain(res []any) (token int64, raised bool, err error) {
	if len(res) != 2 {
		return 0, false, fmt.Errorf("unexpected obtain reply %v", res)
	}
	token, ok1 := res[0].(int64)
	flag, ok2 := res[1].(int64)
	if !ok1 || !ok2 || token <= 0 {
		return 0, false, fmt.Errorf("unexpected obtain reply %v", res)
	}
	return token, flag == 1, nil
}

// newOwner returns 128 random bits, hex-encoded.
func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("locks: owner token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Resource returns the leased resource.
func (ls *Lease) Resource() string { return ls.resource }

// Token returns the fencing token: greater than that of every earlier holder
// of the resource. Storage that accepts writes from holders rejects a token
// lower than the highest it has seen (see FencedWrite).
func (ls *Lease) Token() int64 { return ls.token }

// TTL returns the lease's time to live.
func (ls *Lease) TTL() time.Duration { return ls.ttl }

// Lost returns a channel closed when the lease is lost: a refresh found the
// key gone or owned by someone else, or no refresh succeeded for a ttl
// (less a clock-drift margin) since the last good one, so Lost fires before
// Redis can expire the key. Transient Redis errors are retried until then.
// Release does not close it.
func (ls *Lease) Lost() <-chan struct{} { return ls.lost }

// Err returns why the lease was lost (a *LostError wrapping ErrLeaseLost),
// or nil while it is held or after a plain Release.
func (ls *Lease) Err() error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.err == nil {
		return nil
	}
	return ls.err
}

// Release stops the watchdog and deletes the lease if it is still ours (a
// token-checked delete). It returns an error wrapping ErrNotHeld when the
// lease had already expired or been taken over: anything done under it since
// may have overlapped with the next holder. A ctx without a deadline gets
// the Leaser's OpTimeout. Release is idempotent once it reached Redis; after
// a Redis error it may be called again.
func (ls *Lease) Release(ctx context.Context) error {
	ls.stopOnce.Do(func() {
		close(ls.stop)
		<-ls.done
	})
	ls.relMu.Lock()
	defer ls.relMu.Unlock()
	if ls.released {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ls.leaser.cfg.OpTimeout)
		defer cancel()
	}
	n, err := releaseScript.run(ctx, ls.leaser.rdb, []string{ls.key}, ls.owner).Int64()
	if err != nil {
		return fmt.Errorf("locks: release lease %s: %w", ls.resource, err)
	}
	ls.released = true
	if n == 0 {
		return fmt.Errorf("%w: lease %s (fencing token %d) had expired or been taken over", ErrNotHeld, ls.resource, ls.token)
	}
	return nil
}

// script is a Lua script run by EVALSHA, falling back to EVAL when the
// server does not know it (first use, or after a restart).
type script struct {
	src, hash string
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, hash: hex.EncodeToString(sum[:])}
}

func (s script) run(ctx context.Context, c RedisClient, keys []string, args ...any) *redis.Cmd {
	cmd := c.EvalSha(ctx, s.hash, keys, args...)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return c.Eval(ctx, s.src, keys, args...)
	}
	return cmd
}
