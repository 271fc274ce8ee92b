package results

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/job"
)

// A result whose publish failed (NATS unreachable) is stored in Redis but
// not on NATS, so `paddock wait` would not see it. Record then adds its id
// to <prefix>unpublished (a sorted set, score: time of the failure), and a
// Republisher retries the publish until it succeeds: a result is published
// even when the process that recorded it died during the NATS outage.

func (s *Store) unpublishedKey() string { return s.cfg.KeyPrefix + "unpublished" }

// markUnpublished remembers id for the Republisher; best effort (if Redis
// fails too, the caller's retry of the job republishes it).
func (s *Store) markUnpublished(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := s.rdb.ZAdd(ctx, s.unpublishedKey(), redis.Z{Score: float64(time.Now().UnixMilli()), Member: id}).Err()
	if err != nil {
		s.log.Warn("could not remember an unpublished result", "job", id, "err", err)
	}
}

// RepublishPending publishes up to 100 results whose publish failed, and
// returns how many it published. A result that expired meanwhile is
// forgotten.
func (s *Store) RepublishPending(ctx context.Context) (int, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	ids, err := s.rdb.ZRange(ctx, s.unpublishedKey(), 0, 99).Result()
	if err != nil {
		return 0, fmt.Errorf("results: list unpublished: %w", err)
	}
	n := 0
	for _, id := range ids {
		raw, err := s.rdb.Get(ctx, s.key("result", id)).Bytes()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return n, fmt.Errorf("results: republish %s: %w", id, err)
		default:
			var r job.Result
			if err := json.Unmarshal(raw, &r); err != nil {
				return n, fmt.Errorf("results: stored result of %s is corrupt: %w", id, err)
			}
			if err := s.publish(ctx, r, raw); err != nil {
				return n, fmt.Errorf("results: republish %s: %w", id, err)
			}
			n++
		}
		if err := s.rdb.ZRem(ctx, s.unpublishedKey(), id).Err(); err != nil {
			return n, fmt.Errorf("results: republish %s: %w", id, err)
		}
	}
	// Entries older than the retention have expired results anyway.
	old := strconv.FormatInt(time.Now().Add(-s.cfg.Retention).UnixMilli(), 10)
	_ = s.rdb.ZRemRangeByScore(ctx, s.unpublishedKey(), "-inf", old).Err()
	return n, nil
}

// Republisher runs Store.RepublishPending every interval. Run one next to
// every scheduler (concurrent republishers are harmless: the publish is
// idempotent). It is a restartable service.
type Republisher struct {
	store    *Store
	interval time.Duration

	svc startstop.Service
}

// NewRepublisher returns a stopped Republisher (interval default 5s).
func NewRepublisher(store *Store, interval time.Duration) *Republisher {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	return &Republisher{store: store, interval: interval}
}

// Start runs a pass now and then every interval. Idempotent.
func (p *Republisher) Start(ctx context.Context) error {
	return p.svc.Start(ctx, startstop.NowAndEvery(p.interval, func(ctx context.Context) {
		if n, err := p.store.RepublishPending(ctx); err != nil && ctx.Err() == nil {
			p.store.log.Warn("republishing results failed; retrying", "err", err, "published", n)
		} else if n > 0 {
			p.store.log.Info("republished results", "n", n)
		}
	}))
}

// Stop ends the loop and waits for a pass in progress. Idempotent.
func (p *Republisher) Stop() { p.svc.Stop() }
