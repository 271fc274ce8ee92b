package worker

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/internal/startstop"
)

// Heartbeat keeps <prefix>worker:<id> alive in Redis while the worker runs,
// and answers the reaper's question whether another owner is alive.
//
// Every beat also records the worker in the <prefix>workers sorted set
// (score: last beat, Unix ms; entries older than knownWorkersTTL are
// trimmed). An owner whose key is gone is dead only if this fleet knew it:
// containers of an owner this Redis never heard of belong to another fleet
// sharing the Docker engine (another deployment, a concurrent test run) and
// are not this fleet's to reap.
type Heartbeat struct {
	rdb    redis.UniversalClient
	id     string
	prefix string
	ttl    time.Duration

	svc startstop.Service
}

// NewHeartbeat returns a heartbeat for worker id with the given TTL
// (refreshed every ttl/3).
func NewHeartbeat(rdb redis.UniversalClient, id, prefix string, ttl time.Duration) *Heartbeat {
	return &Heartbeat{rdb: rdb, id: id, prefix: prefix, ttl: ttl}
}

func (h *Heartbeat) key(id string) string { return h.prefix + "worker:" + id }

func (h *Heartbeat) known() string { return h.prefix + "workers" }

// knownWorkersTTL is how long a dead worker stays known (its leftover
// containers reapable) after its last beat.
const knownWorkersTTL = 7 * 24 * time.Hour

// Start writes the first beat synchronously, then beats in the background.
func (h *Heartbeat) Start(ctx context.Context) error {
	return h.svc.StartWith(ctx, h.beat, startstop.Every(h.ttl/3, func(ctx context.Context) {
		_ = h.beat(ctx) // a missed beat is retried; the TTL covers two
	}))
}

func (h *Heartbeat) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.ttl/3)
	defer cancel()
	now := time.Now()
	_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, h.key(h.id), now.UTC().Format(time.RFC3339Nano), h.ttl)
		p.ZAdd(ctx, h.known(), redis.Z{Score: float64(now.UnixMilli()), Member: h.id})
		p.ZRemRangeByScore(ctx, h.known(), "-inf", strconv.FormatInt(now.Add(-knownWorkersTTL).UnixMilli(), 10))
		return nil
	})
	return err
}

// Stop ends the beats and deletes the key (a clean exit needs no reaping
// grace). Idempotent.
func (h *Heartbeat) Stop() {
	if !h.svc.Stop() {
		return
	}
	ctx, c := context.WithTimeout(context.Background(), 2*time.Second)
	defer c()
	_ = h.rdb.Del(ctx, h.key(h.id)).Err()
}

// Alive reports whether owner's heartbeat key exists, or owner is not a
// worker of this fleet (never beat in this Redis): only a known worker whose
// heartbeat expired is dead.
func (h *Heartbeat) Alive(ctx context.Context, owner string) (bool, error) {
	var exists *redis.IntCmd
	var seen *redis.FloatCmd
	_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, h.key(owner))
		seen = p.ZScore(ctx, h.known(), owner)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	if exists.Val() == 1 {
		return true, nil
	}
	return errors.Is(seen.Err(), redis.Nil), nil // unknown owner: not ours
}
