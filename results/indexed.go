package results

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Indexed reports which of keys (tenant/id) the job index has an entry for,
// in one round trip. A job the index does not hold yet is one the
// scheduler has not enqueued: the job list shows it from its submission
// (scheduler.Lister).
func (s *Store) Indexed(ctx context.Context, keys []string) (map[string]bool, error) {
	if len(keys) == 0 {
		return map[string]bool{}, nil
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Exists(ctx, s.idxJobPrefix()+k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("results: probe the job index: %w", err)
	}
	in := make(map[string]bool, len(keys))
	for i, k := range keys {
		in[k] = cmds[i].Val() > 0
	}
	return in, nil
}
