package asynqx

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/job"
)

// The rescuer: a second crash recovery beside asynq's own.
//
// asynq v0.26 recovers the task of a dead worker itself, but slowly: the
// processor leases each active task (asynq:{<queue>}:lease, a sorted set of
// task ids scored by the lease's expiry, 30 s ahead, extended by the
// server's heartbeater every 5 s), and the recoverer, when a server starts
// and then every minute, moves the active tasks (asynq:{<queue>}:active, a
// list) whose lease expired more than 30 s ago to the retry set, to run
// again after their retry delay: one to two minutes after the crash.
// Neither the lease nor the recoverer's interval is configurable.
//
// The rescuer runs a dead worker's jobs again within seconds instead. It
// relies on asynq for:
//
//   - the task id being the job's key (job.TaskKey) and unique while the
//     task is kept: two rescuers enqueueing the same rescue id get
//     asynq.ErrTaskIDConflict, and only one task runs;
//   - Inspector.GetTaskInfo of the dead worker's task, still active (asynq
//     keeps its hash, asynq:{<queue>}:t:<id>, with its payload, headers,
//     MaxRetry, Timeout and Retention) until the recoverer moves it;
//   - the layout of an active task and of a completed one, which the
//     rescuer's retirement (rescue_retire.lua) edits directly: once the
//     rescue is enqueued and the original's lease expired (RetireMargin
//     past it), the original leaves asynq:{<queue>}:active (a list) and
//     asynq:{<queue>}:lease, and is completed as asynq completes a task
//     (asynq:{<queue>}:completed, a sorted set scored by now + retention
//     in Unix seconds; the hash's state "completed"; without retention the
//     hash is deleted), so that queue counts (the dashboard, asynqmon,
//     KEDA) stop counting it within about 35 s of the crash, not after
//     asynq's recoverer. asynq's heartbeater extends leases with ZADD XX,
//     so a late extension by a frozen worker never brings it back;
//   - otherwise (a retirement not yet due when the recoverer passes) the
//     recoverer retrying the original task (counted against its
//     MaxRetry), which then runs against a job that another task carries:
//     results.Store.BeginRunAs refuses it (results.ErrStaleTask) and the
//     worker completes it without running.
//
// TestAsynqLeasesAnActiveTask, TestAsynqRecoversAnExpiredLease and
// TestAsynqCompletedLayout pin the key names and types above and the
// recoverer's move; TestRescue* pin the rest against a real asynq Client
// and Inspector on a real Redis.
//
// And on Paddock's keys (results/doc.go): the worker's heartbeat,
// <prefix>worker:<id>, whose absence makes a worker dead; the active sets
// results.Store.BeginRunAs writes (<prefix>active:<worker>, job key →
// "run|task id|queue", and the set <prefix>active of such workers); the
// run counter <prefix>runs:<key>, the result <prefix>result:<key>, and the
// task id now carrying the job, <prefix>task:<key>, which rescue_claim.lua
// sets atomically with results/beginrun.lua's check of it.
//
// What would let us delete it: asynq.Config fields for the lease duration
// (today the constant rdb.LeaseDuration, 30 s, extended every 5 s) and the
// recoverer's interval (1 minute) with its "expired for at least" bound (30
// s) tied to the lease (docs/reliability.md, "Upstream asynq change we
// would propose"). With a 6 s lease and a 2 s recoverer, asynq would retry
// a dead worker's task as soon as the rescuer does, under its own id; only
// the worker's self-fence (worker/fence.go) would remain.

// RescueSep separates a job key from the suffix of a rescue task's id:
// <key>#rescue-<run>. '#' is in no job key, so job.TaskKey cuts it off.
const RescueSep = "#rescue-"

// RescueID is the task id under which run n of key is rescued: each run is
// rescued once, whichever worker's rescuer gets there (asynq refuses a
// second task with the same id).
func RescueID(key string, run int) string { return key + RescueSep + strconv.Itoa(run) }

//go:embed rescue_scan.lua
var rescueScanSource string

//go:embed rescue_claim.lua
var rescueClaimSource string

//go:embed rescue_retire.lua
var rescueRetireSource string

var (
	rescueScanScript   = redis.NewScript(rescueScanSource)
	rescueClaimScript  = redis.NewScript(rescueClaimSource)
	rescueRetireScript = redis.NewScript(rescueRetireSource)
)

// RetireMargin is how long past its lease's expiry (by Redis's clock) a
// rescued original task is taken out of asynq's active list: room for the
// clocks of the workers (which score the lease) and of Redis to differ.
const RetireMargin = 5 * time.Second

// RescuerConfig configures a Rescuer. A zero field takes its default.
type RescuerConfig struct {
	// KeyPrefix of Paddock's Redis keys (default "paddock:").
	KeyPrefix string
	// Interval between passes (default 2 s; one Redis script per pass).
	Interval time.Duration
	// Logger, default slog.Default(); logs with component=rescuer.
	Logger *slog.Logger
	// OnRescue is called with each rescue task id enqueued (tests, metrics);
	// not again for a run an earlier pass enqueued already.
	OnRescue func(taskID string)
	// Wake, optional, is called with the queue of each rescue task
	// enqueued, as the scheduler wakes idle workers after its enqueues
	// (job.WakeSubject): without it, a fleet with wake-ups finds the
	// rescue only at its backstop poll.
	Wake func(queue string)
	// OnRetire is called with each original task taken out of asynq's
	// active list (tests, metrics).
	OnRetire func(taskID string)
	// Grace is how long this rescuer must have seen a worker dead (its
	// heartbeat key gone at every pass since the first that found it so)
	// before it rescues the worker's runs. It is the time a worker cut off
	// from Redis has, past its heartbeat's expiry, for its self-fence to end
	// its boxes (the fence fires at 2/3 of the TTL; on a loaded host the
	// boxes' end has been measured to take over the remaining third). 0
	// rescues at the first pass that finds the worker dead.
	Grace time.Duration
}

// Rescuer makes the jobs of dead workers run again within seconds, instead
// of after asynq's lease (30 s) and recoverer pass (every minute).
//
// Every worker notes its runs in <prefix>active:<worker> when they begin
// (results.Store.BeginRunAs; EndRun removes the entry when the run ends).
// Every Interval the rescuer reads, in one script, the entries of workers
// whose heartbeat key is gone. For each run that has no result and was not
// started again since, it moves the job to a new task id
// (<prefix>task:<key> = <key>#rescue-<run>, in a script atomic with
// BeginRunAs), enqueues that task with asynq's public Client and wakes
// idle workers for its queue (RescuerConfig.Wake). The original task is
// then stale: its run can record nothing (results.Store.RecordRun), and it
// leaves asynq's active list once its lease expired (retire), or, if
// asynq's recoverer retries it first, completes without running. A dead worker fenced itself before
// its key could expire (worker.Heartbeat), and its boxes died with it
// (their watchdogs), so the re-run never overlaps the first run. It is a
// restartable service.
type Rescuer struct {
	rdb    redis.UniversalClient
	client *asynq.Client
	insp   *asynq.Inspector
	cfg    RescuerConfig
	log    *slog.Logger

	svc startstop.Service

	mu        sync.Mutex
	deadSince map[string]time.Time // worker → when a pass first found it dead (Grace)
}

// NewRescuer returns a stopped rescuer over rdb, the Redis of asynq and of
// Paddock's keys.
func NewRescuer(rdb redis.UniversalClient, cfg RescuerConfig) *Rescuer {
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "paddock:"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Rescuer{rdb: rdb, client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		cfg: cfg, log: cfg.Logger.With("component", "rescuer")}
}

// Start runs a pass every interval. Idempotent; Start may follow Stop.
func (r *Rescuer) Start(ctx context.Context) error {
	return r.svc.Start(ctx, startstop.Every(r.cfg.Interval, func(ctx context.Context) {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, "rescue pass failed; retrying next pass", "err", err)
		}
	}))
}

// Stop ends the loop and waits for a pass in progress. Idempotent.
func (r *Rescuer) Stop() { r.svc.Stop() }

// Pass runs one pass and returns the task ids it enqueued.
func (r *Rescuer) Pass(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := rescueScanScript.Run(ctx, r.rdb, []string{r.cfg.KeyPrefix + "active"}, r.cfg.KeyPrefix).Slice()
	if err != nil {
		return nil, fmt.Errorf("asynqx: scan active runs of dead workers: %w", err)
	}
	var done []string
	var errs []error
	dead := r.pastGrace(reply)
	for i := 0; i+1 < len(reply); i += 2 {
		w, _ := reply[i].(string)
		entries, _ := reply[i+1].([]any)
		if !dead[w] {
			continue
		}
		for j := 0; j+1 < len(entries); j += 2 {
			key, _ := entries[j].(string)
			val, _ := entries[j+1].(string)
			id, err := r.rescue(ctx, w, key, val)
			if err != nil {
				errs = append(errs, err)
			} else if id != "" {
				done = append(done, id)
			}
		}
	}
	retired, err := r.retire(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range retired {
		r.log.InfoContext(ctx, "retired a rescued job's original task from asynq's active list (its lease expired)", "task", id)
		if r.cfg.OnRetire != nil {
			r.cfg.OnRetire(id)
		}
	}
	return done, errors.Join(errs...)
}

// pastGrace notes when each dead worker of a scan reply was first found
// dead, forgets the workers the scan no longer returns (alive again, or
// nothing left to rescue), and returns those dead for Grace or more.
func (r *Rescuer) pastGrace(reply []any) map[string]bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deadSince == nil {
		r.deadSince = map[string]time.Time{}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(reply); i += 2 {
		w, _ := reply[i].(string)
		first, ok := r.deadSince[w]
		if !ok {
			first = now
			r.deadSince[w] = now
		}
		seen[w] = now.Sub(first) >= r.cfg.Grace
	}
	for w := range r.deadSince {
		if _, ok := seen[w]; !ok {
			delete(r.deadSince, w)
		}
	}
	return seen
}

// retire runs rescue_retire.lua: the original tasks of rescued runs leave
// asynq's active list and lease set once their lease expired, and return
// their ids.
func (r *Rescuer) retire(ctx context.Context) ([]string, error) {
	ids, err := rescueRetireScript.Run(ctx, r.rdb, []string{r.cfg.KeyPrefix + "retire"}, int(RetireMargin/time.Second)).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("asynqx: retire rescued tasks: %w", err)
	}
	return ids, nil
}

// rescue re-enqueues dead worker w's run of key (val: "run|task id|queue")
// unless it ended or started again, and returns the rescue task's id ("" if
// nothing was to do).
func (r *Rescuer) rescue(ctx context.Context, w, key, val string) (string, error) {
	runS, rest, _ := strings.Cut(val, "|")
	taskID, queue, _ := strings.Cut(rest, "|")
	run, _ := strconv.Atoi(runS)
	p := r.cfg.KeyPrefix
	active := p + "active:" + w
	// The task first: its payload is the job's spec. Read before the claim,
	// so that a claimed job always has a task to enqueue.
	info, err := r.insp.GetTaskInfo(queue, taskID)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) || err == nil && info.MaxRetry <= 0 {
		// Gone (it ended), or out of tries: asynq's recoverer retries or
		// archives it (and the sweeper then records infra).
		return "", r.rdb.HDel(ctx, active, key).Err()
	}
	if err != nil {
		return "", fmt.Errorf("asynqx: read task %s of dead worker %s: %w", taskID, w, err)
	}
	newID := RescueID(key, run)
	keys := []string{p + "result:" + key, p + "runs:" + key, p + "task:" + key, active}
	claimed, err := rescueClaimScript.Run(ctx, r.rdb, keys, key, run, taskID, newID).Int()
	if err != nil {
		return "", fmt.Errorf("asynqx: claim job %s of dead worker %s: %w", key, w, err)
	}
	if claimed == 0 {
		return "", nil
	}
	created, err := r.enqueue(ctx, info, newID, queue)
	if err != nil {
		return "", fmt.Errorf("asynqx: enqueue rescue %s of dead worker %s: %w", newID, w, err)
	}
	if created {
		r.log.InfoContext(ctx, "rescued a dead worker's job", "job", key, "dead_worker", w, "run", run, "task", newID)
		if r.cfg.Wake != nil {
			r.cfg.Wake(queue)
		}
		if r.cfg.OnRescue != nil {
			r.cfg.OnRescue(newID)
		}
	}
	// The claim's last writes: they run even when Stop canceled the pass,
	// or the next pass would find the entry and claim the run again. The
	// original task is noted for retirement from asynq's active list
	// (retire), in the same transaction.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	retire := p + "retire"
	_, err = r.rdb.TxPipelined(dctx, func(pl redis.Pipeliner) error {
		pl.SAdd(dctx, retire, queue+"|"+strconv.Itoa(int(info.Retention/time.Second))+"|"+taskID)
		pl.Expire(dctx, retire, 24*time.Hour)
		pl.HDel(dctx, active, key)
		return nil
	})
	return newID, err
}

// enqueue puts the rescue task newID, a copy of info's task with one try
// fewer, in queue. A task with that id already there is another rescuer's
// (or an earlier pass's) copy: that is success, with created false.
func (r *Rescuer) enqueue(ctx context.Context, info *asynq.TaskInfo, newID, queue string) (created bool, err error) {
	opts := []asynq.Option{asynq.TaskID(newID), asynq.Queue(queue), asynq.MaxRetry(info.MaxRetry - 1)} // each rescue uses a try
	if info.Timeout > 0 {
		opts = append(opts, asynq.Timeout(info.Timeout))
	}
	if info.Retention > 0 {
		opts = append(opts, asynq.Retention(info.Retention))
	}
	_, err = r.client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(job.TaskType, info.Payload, info.Headers), opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil
	}
	return err == nil, err
}
