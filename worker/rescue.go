package worker

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

// rescueSep separates a job key from the suffix of a rescue task's id:
// <key>#rescue-<run>. '#' is in no job key, so jobKey can cut it off.
const rescueSep = "#rescue-"

// jobKey is the job key an asynq task id carries: the id itself, or the
// key of a rescue task (<key>#rescue-<run>).
func jobKey(taskID string) string { return job.TaskKey(taskID) }

// rescueID is the task id under which run n of key is rescued: each run is
// rescued once, whichever worker's rescuer gets there (asynq refuses a
// second task with the same id).
func rescueID(key string, run int) string { return key + rescueSep + strconv.Itoa(run) }

//go:embed rescue_scan.lua
var rescueScanSource string

//go:embed rescue_claim.lua
var rescueClaimSource string

var (
	rescueScanScript  = redis.NewScript(rescueScanSource)
	rescueClaimScript = redis.NewScript(rescueClaimSource)
)

// Rescuer makes the jobs of dead workers run again within seconds, instead
// of after asynq's lease (30 s) and recoverer pass (every minute).
//
// Every worker notes its runs in <prefix>active:<worker> when they begin
// (results.Store.BeginRunAs; the handler removes the entry when the run
// ends). Every Interval the rescuer reads, in one script, the entries of
// workers whose heartbeat key is gone. For each run that has no result and
// was not started again since, it moves the job to a new task id
// (<prefix>task:<key> = <key>#rescue-<run>, in a script atomic with
// BeginRunAs) and enqueues that task with asynq's public Client: the
// original task, when asynq's recoverer retries it a minute later, is then
// stale and completes without running. A dead worker fenced itself before
// its key could expire (Heartbeat), and its boxes died with it (their
// watchdogs), so the re-run never overlaps the first run.
type Rescuer struct {
	rdb      redis.UniversalClient
	client   *asynq.Client
	insp     *asynq.Inspector
	prefix   string
	interval time.Duration
	log      *slog.Logger
	// OnRescue is called with each task id enqueued (tests, metrics).
	OnRescue func(taskID string)

	svc startstop.Service
}

// NewRescuer returns a rescuer over rdb (asynq and Paddock's keys under
// prefix) that passes every interval.
func NewRescuer(rdb redis.UniversalClient, prefix string, interval time.Duration, log *slog.Logger) *Rescuer {
	return &Rescuer{rdb: rdb, client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		prefix: prefix, interval: interval, log: log.With("component", "rescuer")}
}

// Start runs a pass every interval. Idempotent; Start may follow Stop.
func (r *Rescuer) Start(ctx context.Context) error {
	return r.svc.Start(ctx, startstop.Every(r.interval, func(ctx context.Context) {
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
	reply, err := rescueScanScript.Run(ctx, r.rdb, []string{r.prefix + "active"}, r.prefix).Slice()
	if err != nil {
		return nil, fmt.Errorf("worker: scan active runs of dead workers: %w", err)
	}
	var done []string
	var errs []error
	for i := 0; i+1 < len(reply); i += 2 {
		w, _ := reply[i].(string)
		entries, _ := reply[i+1].([]any)
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
	return done, errors.Join(errs...)
}

// rescue re-enqueues dead worker w's run of key (val: "run|task id|queue")
// unless it ended or started again, and returns the rescue task's id ("" if
// nothing was to do).
func (r *Rescuer) rescue(ctx context.Context, w, key, val string) (string, error) {
	runS, rest, _ := strings.Cut(val, "|")
	taskID, queue, _ := strings.Cut(rest, "|")
	run, _ := strconv.Atoi(runS)
	active := r.prefix + "active:" + w
	// The task first: its payload is the job's spec. Read before the claim,
	// so that a claimed job always has a task to enqueue.
	info, err := r.insp.GetTaskInfo(queue, taskID)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) || err == nil && info.MaxRetry <= 0 {
		// Gone (it ended), or out of tries: asynq's recoverer retries or
		// archives it (and the sweeper then records infra).
		return "", r.rdb.HDel(ctx, active, key).Err()
	}
	if err != nil {
		return "", fmt.Errorf("worker: read task %s of dead worker %s: %w", taskID, w, err)
	}
	newID := rescueID(key, run)
	keys := []string{r.prefix + "result:" + key, r.prefix + "runs:" + key, r.prefix + "task:" + key, active}
	claimed, err := rescueClaimScript.Run(ctx, r.rdb, keys, key, run, taskID, newID).Int()
	if err != nil {
		return "", fmt.Errorf("worker: claim job %s of dead worker %s: %w", key, w, err)
	}
	if claimed == 0 {
		return "", nil
	}
	opts := []asynq.Option{asynq.TaskID(newID), asynq.Queue(queue), asynq.MaxRetry(info.MaxRetry - 1)} // each rescue uses a try
	if info.Timeout > 0 {
		opts = append(opts, asynq.Timeout(info.Timeout))
	}
	if info.Retention > 0 {
		opts = append(opts, asynq.Retention(info.Retention))
	}
	_, err = r.client.EnqueueContext(ctx, asynq.NewTaskWithHeaders(job.TaskType, info.Payload, info.Headers), opts...)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return "", fmt.Errorf("worker: enqueue rescue %s of dead worker %s: %w", newID, w, err)
	}
	r.log.InfoContext(ctx, "rescued a dead worker's job", "job", key, "dead_worker", w, "run", run, "task", newID)
	if r.OnRescue != nil {
		r.OnRescue(newID)
	}
	return newID, r.rdb.HDel(ctx, active, key).Err()
}

// errFenced is the cancel cause of the jobs of a worker that could not
// renew its heartbeat: they may be rescued elsewhere, so they are killed and
// never record a result.
var errFenced = errors.New("worker: heartbeat not renewed in time (Redis unreachable or the worker was frozen); the job was killed so that a rescue elsewhere never overlaps it")

// fence tracks running handlers so that the heartbeat's fence can cancel
// them all.
type fence struct {
	mu      sync.Mutex
	next    int
	cancels map[int]context.CancelCauseFunc
}

func (f *fence) add(c context.CancelCauseFunc) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancels == nil {
		f.cancels = map[int]context.CancelCauseFunc{}
	}
	f.next++
	f.cancels[f.next] = c
	return f.next
}

func (f *fence) remove(id int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.cancels, id)
}

// cancelAll cancels every running handler with errFenced.
func (f *fence) cancelAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.cancels {
		c(errFenced)
	}
}

type epochKey struct{}

// fenceable is the middleware that refuses a task while the worker is
// fenced, remembers the fence epoch a job starts in, and lets the fence
// cancel the job.
func (w *Worker) fenceable(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		epoch, fenced := w.hb.Epoch()
		if fenced {
			id, _ := asynq.GetTaskID(ctx)
			return fmt.Errorf("worker: job %s not started: %w", jobKey(id), errFenced)
		}
		ctx, cancel := context.WithCancelCause(context.WithValue(ctx, epochKey{}, epoch))
		defer cancel(nil)
		n := w.fence.add(cancel)
		defer w.fence.remove(n)
		return next.ProcessTask(ctx, t)
	})
}

// fenced reports whether the job of ctx must not record a result: the
// worker fenced itself since the job started (its heartbeat may have
// expired and the job been rescued elsewhere), or is fenced now.
func (w *Worker) fenced(ctx context.Context) bool {
	start, ok := ctx.Value(epochKey{}).(uint64)
	epoch, now := w.hb.Epoch()
	return now || ok && epoch != start || errors.Is(context.Cause(ctx), errFenced)
}

// endRun removes the run of key from this worker's active set.
func (w *Worker) endRun(ctx context.Context, key string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.rdb.HDel(dctx, w.cfg.KeyPrefix+"active:"+w.cfg.ID, key).Err(); err != nil {
		w.log.WarnContext(ctx, "could not remove the run from the active set; a rescuer checks it against the run counter", "job", key, "err", err)
	}
}
