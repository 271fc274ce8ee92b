package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/internal/startstop"
)

// schedulerKeyPrefix + id marks a live scheduler in Redis, for the others'
// --slots auto (each takes its share of the fleet's job slots).
const schedulerKeyPrefix = "paddock:scheduler:"

// parseSlots reads --slots: "auto", or a number of slots (0: no bound).
func parseSlots(v string) (n int, auto bool, err error) {
	if v == "auto" {
		return 0, true, nil
	}
	n, err = strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("--slots %q: want auto, or a number of slots (0: no bound)", v)
	}
	return n, false, nil
}

// presence keeps this scheduler's key alive (TTL 15 s, every 5 s) while
// it runs.
type presence struct {
	rdb redis.UniversalClient
	key string
	svc startstop.Service
}

func startPresence(ctx context.Context, rdb redis.UniversalClient, id string) (*presence, error) {
	p := &presence{rdb: rdb, key: schedulerKeyPrefix + id}
	beat := func(ctx context.Context) error { return rdb.Set(ctx, p.key, "1", 15*time.Second).Err() }
	err := p.svc.StartWith(ctx, beat, startstop.Every(5*time.Second, func(ctx context.Context) { _ = beat(ctx) }))
	return p, err
}

func (p *presence) stop() {
	p.svc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = p.rdb.Del(ctx, p.key).Err()
}

// fleetSlots is --slots auto: the concurrency of every active worker
// (asynq server) divided among the live schedulers, rounded up.
func fleetSlots(rdb redis.UniversalClient, insp *asynq.Inspector) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		servers, err := insp.Servers()
		if err != nil {
			return 0, fmt.Errorf("list workers: %w", err)
		}
		total := 0
		for _, s := range servers {
			if s.Status == "active" {
				total += s.Concurrency
			}
		}
		keys, _, err := rdb.Scan(ctx, 0, schedulerKeyPrefix+"*", 1000).Result()
		if err != nil {
			return 0, fmt.Errorf("count schedulers: %w", err)
		}
		n := max(len(keys), 1)
		return (total + n - 1) / n, nil
	}
}
