package results

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrStaleTask is wrapped by BeginRunAs when the task starting the run no
// longer carries the job: a rescuer re-enqueued it under another task id
// after its worker died. The delivery must complete without running.
var ErrStaleTask = errors.New("results: stale task")

// BeginRun counts one more start of the job and returns the run number
// (1 for the first start): BeginRunAs with no owner (the task is the
// job's own, no active entry).
func (s *Store) BeginRun(ctx context.Context, key string) (int, error) {
	return s.BeginRunAs(ctx, key, RunOwner{})
}

// RunOwner names who starts a run: the worker (its active set,
// <prefix>active:<worker>, job key → "run|task id|queue") and the asynq
// task (its id and queue). A zero Worker writes no active entry; a zero
// TaskID is the job key (the scheduler's task).
type RunOwner struct{ Worker, TaskID, Queue string }

//go:embed beginrun.lua
var beginRunSource string

var beginRunScript = redis.NewScript(beginRunSource)

// BeginRunAs counts one more start of the job and returns the run number
// (1 for the first start), unless the task o.TaskID no longer carries the
// job: a rescuer re-enqueued it under another task id
// (<prefix>task:<key>), and then it returns ErrStaleTask and counts
// nothing. It notes the run in o.Worker's active set, which a rescuer
// reads when the worker's heartbeat is gone. The counter and the active
// set expire after the retention. It also marks the job running in the
// job index (index.go), in the same round trip; an index failure is
// logged, never returned.
func (s *Store) BeginRunAs(ctx context.Context, key string, o RunOwner) (int, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	o.TaskID = cmp.Or(o.TaskID, key)
	rk := s.key("runs", key)
	keys := []string{rk, s.key("task", key), rk, s.cfg.KeyPrefix + "active"}
	if o.Worker != "" {
		keys[2] = s.key("active", o.Worker)
	}
	var begin, idx *redis.Cmd
	iw := s.runningWrite(key) // index.go: the job is running, in the same round trip
	// A plain pipeline, not MULTI: the index is a view whose script orders
	// its own writes (a terminal entry never changes), so nothing needs the
	// two to be one transaction, and MULTI/EXEC would be two commands more.
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		// EVAL, not EVALSHA: a NOSCRIPT here would need a second round trip.
		begin = beginRunScript.Eval(ctx, p, keys, o.TaskID, key, s.cfg.Retention.Milliseconds(), o.Queue, s.activeRefresh(o.Worker))
		idx = s.indexInPipe(ctx, p, iw)
		return nil
	})
	if e := begin.Err(); e != nil {
		return 0, fmt.Errorf("results: begin run %s: %w", key, e)
	}
	if err != nil && idx.Err() == nil {
		return 0, fmt.Errorf("results: begin run %s: %w", key, err)
	}
	n, _ := begin.Int()
	if n < 0 {
		return 0, fmt.Errorf("%w: %s is not the task of job %s any more", ErrStaleTask, o.TaskID, key)
	}
	s.settleIndex(ctx, idx, iw)
	return n, nil
}

// activeRefresh is "1" when worker's active keys are due a TTL refresh
// (its first run through this Store, then every quarter of the
// retention), else "0": a worker whose hash never empties would otherwise
// keep the TTL its first run gave.
func (s *Store) activeRefresh(worker string) string {
	if worker == "" {
		return "0"
	}
	now := time.Now()
	if last, ok := s.activeTTL.Load(worker); ok && now.Sub(last.(time.Time)) < s.cfg.Retention/4 {
		return "0"
	}
	s.activeTTL.Store(worker, now)
	return "1"
}

// EndRun removes run (as BeginRunAs numbered it) of key from worker's
// active set, once the run ended, whatever its outcome. It leaves an entry
// of another run alone: a worker that resumed from a freeze may run the
// job's rescue itself while the handler of its stale run is still ending.
// A run of 0 removes the entry whatever run it notes. It is a final write:
// it runs on a detached context with its own deadline, and a failure is
// returned for the caller to log (a rescuer checks a leftover entry
// against the run counter and the result, so it is harmless).
func (s *Store) EndRun(ctx context.Context, worker, key string, run int) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := endRunScript.Run(ctx, s.rdb, []string{s.key("active", worker)}, key, run).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("results: end run %s of %s: %w", key, worker, err)
	}
	return nil
}

// endRunScript deletes the active entry ARGV[1] of hash KEYS[1] if it
// notes run ARGV[2] ("run|task id|queue"), or whatever it notes when
// ARGV[2] is 0.
var endRunScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and (ARGV[2] == '0' or string.sub(v, 1, #ARGV[2] + 1) == ARGV[2] .. '|') then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
`)

// TaskOf returns the id of the asynq task that carries the job now: the
// job key itself, or the rescue task a rescuer moved it to
// (<prefix>task:<key>, internal/asynqx's rescuer). Any other task of the
// job is stale: it completes without running, and whoever looks for the
// job in the queue (the canceler, the sweeper) must look for this one.
func (s *Store) TaskOf(ctx context.Context, key string) (string, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	id, err := s.rdb.Get(ctx, s.key("task", key)).Result()
	if errors.Is(err, redis.Nil) {
		return key, nil
	}
	if err != nil {
		return "", fmt.Errorf("results: task of %s: %w", key, err)
	}
	return id, nil
}

// TasksOf is TaskOf for many jobs in one round trip: job key → the id of
// the task carrying it.
func (s *Store) TasksOf(ctx context.Context, keys []string) (map[string]string, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, s.key("task", k))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("results: tasks of %d jobs: %w", len(keys), err)
	}
	out := make(map[string]string, len(keys))
	for i, k := range keys {
		out[k] = k
		if v, err := cmds[i].Result(); err == nil && v != "" {
			out[k] = v
		}
	}
	return out, nil
}
