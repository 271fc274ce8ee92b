package worker

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"

	"github.com/hibiken/asynq"

	"github.com/paddockhq/paddock/job"
)

// jobKey is the job key an asynq task id carries: the id itself, or the
// key of a rescue task (<key>#rescue-<run>, internal/asynqx's rescuer).
func jobKey(taskID string) string { return job.TaskKey(taskID) }

// rescuer is what the worker needs of internal/asynqx.Rescuer, which runs
// the jobs of dead workers again: a restartable service it starts with the
// heartbeat and stops before it.
type rescuer interface {
	Start(ctx context.Context) error
	Stop()
}

// The self-fence: a worker that could not renew its heartbeat in time
// (Heartbeat.OnFence) may have been judged dead, and its runs rescued
// elsewhere (internal/asynqx.Rescuer), so it kills them and lets none
// record a result.

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

// running is the number of handlers running now.
func (f *fence) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cancels)
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

// endRun removes run of key from this worker's active set
// (results.Store.EndRun, a final write on its own deadline; another run's
// entry, this worker's run of the job's rescue, stays).
func (w *Worker) endRun(ctx context.Context, key string, run int) {
	if err := w.runs.EndRun(ctx, w.cfg.ID, key, run); err != nil {
		w.log.WarnContext(ctx, "could not remove the run from the active set; a rescuer checks it against the run counter", "job", key, "err", err)
	}
}
