package asynqx

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/results"
)

// LostTasks finds jobs whose task Redis no longer has: the scheduler asks
// it of the jobs whose submissions it holds without a result (it is the
// scheduler's TaskFinder). A Sentinel failover can lose the last writes
// before the kill (replication is asynchronous), the enqueued task among
// them, and such a job would wait forever. Three round trips for all.
//
// It relies on asynq v0.26's key layout: asynq:{<queue>}:t:<task id>, the
// task hash that lives from enqueue until its retention after completion,
// and asynq:queues, the set of queues asynq's inspector knows (pinned by
// TestLostTasksFindsWhatRedisLost). Upstream, an Inspector.TaskExists (or
// a GetTaskInfo that does not read the whole message) would replace it.
type LostTasks struct {
	Store *results.Store // which task carries each job (a rescue moves it)
	RDB   redis.UniversalClient
}

// Missing maps each job key of queued (key → its asynq queue) to whether
// its task is gone. The queues of lost tasks are registered again: the
// same failover can lose a queue's entry in asynq:queues, which asynq's
// client writes once per process, and without it the inspectors (the
// dashboard, the sweeper, the slots) answer "queue not found" until every
// process restarts.
func (l LostTasks) Missing(ctx context.Context, queued map[string]string) (map[string]bool, error) {
	if len(queued) == 0 {
		return map[string]bool{}, nil
	}
	keys := make([]string, 0, len(queued))
	for k := range queued {
		keys = append(keys, k)
	}
	tasks, err := l.Store.TasksOf(ctx, keys)
	if err != nil {
		return nil, err
	}
	exists := make([]*redis.IntCmd, len(keys))
	if _, err := l.RDB.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			exists[i] = p.Exists(ctx, "asynq:{"+queued[k]+"}:t:"+tasks[k])
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("asynqx: lost tasks: %w", err)
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
		if err := l.RDB.SAdd(ctx, "asynq:queues", lostQueues...).Err(); err != nil {
			return nil, fmt.Errorf("asynqx: lost tasks: register queues: %w", err)
		}
	}
	return out, nil
}
