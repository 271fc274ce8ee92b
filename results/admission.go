package results

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Admission: the tenants' rate window (tenant.Quota's rate). It is the
// scheduler's, which calls Admit before it enqueues a job, but it lives
// here, with every other Paddock key in Redis, because every scheduler of
// the fleet shares the counter.
//
//	<prefix>rate:<tenant>:<unix second>  jobs admitted in that second (2 s TTL)

// Admit counts one job of tenant against a rate of perSecond jobs a second,
// fleet-wide (every scheduler shares the counter), and reports whether the
// job is within it. The window is the current second of the Redis clock's
// caller (a fixed window: up to 2×perSecond may pass around a window's
// edge).
func (s *Store) Admit(ctx context.Context, tenant string, perSecond int) (bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	key := s.key("rate", tenant+":"+strconv.FormatInt(time.Now().Unix(), 10))
	var incr *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, key)
		p.Expire(ctx, key, 2*time.Second)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("results: rate of %s: %w", tenant, err)
	}
	return incr.Val() <= int64(perSecond), nil
}
