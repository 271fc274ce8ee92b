package results

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Missing reports which of the jobs in queued (job key → its asynq
// queue) have no task in Redis: neither the task the job key names
// (TaskID = the job key) nor the one the job moved to (<prefix>task:<key>,
// a rescue). The scheduler asks this of the jobs whose submissions it
// holds and that have no result: a Sentinel failover can lose the last
// writes before the kill (replication is asynchronous), the enqueued task
// among them, and such a job would wait forever. Two round trips for all.
//
// It relies on asynq v0.26's key layout, asynq:{<queue>}:t:<task id> (a
// task hash that lives from enqueue until its retention after
// completion) and asynq:queues (the set of queues its inspector knows),
// pinned by TestMissingFindsLostTasks.
func (s *Store) Missing(ctx context.Context, queued map[string]string) (map[string]bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	keys := make([]string, 0, len(queued))
	moved := make([]*redis.StringCmd, 0, len(queued))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k := range queued {
			keys = append(keys, k)
			moved = append(moved, p.Get(ctx, s.key("task", k)))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("results: missing tasks: %w", err)
	}
	exists := make([]*redis.IntCmd, len(keys))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			id := k
			if v, err := moved[i].Result(); err == nil && v != "" {
				id = v
			}
			exists[i] = p.Exists(ctx, "asynq:{"+queued[k]+"}:t:"+id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("results: missing tasks: %w", err)
	}
	out := make(map[string]bool, len(keys))
	var lostQueues []any
	for i, k := range keys {
		out[k] = exists[i].Val() == 0
		if out[k] {
			lostQueues = append(lostQueues, queued[k])
		}
	}
	if len(lostQueues) > 0 {
		// The same failover can have lost the queue's entry in asynq's
		// queue set (asynq:queues), which asynq's client writes once per
		// process: without it the inspectors (dashboard, sweeper, slots)
		// answer "queue not found" until every process restarts.
		if err := s.rdb.SAdd(ctx, "asynq:queues", lostQueues...).Err(); err != nil {
			return nil, fmt.Errorf("results: missing tasks: register queues: %w", err)
		}
	}
	return out, nil
}
