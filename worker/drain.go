package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// drainKillMargin is added to the drain grace to form asynq's
// ShutdownTimeout. At the end of the grace the worker kills the containers
// of the jobs still running (their handlers' contexts end); the handlers
// then hold their tasks until asynq's shutdown re-queues them at grace +
// margin. So a re-queued job never starts elsewhere while its first
// container still runs, and the re-queue does not count as a retry.
const drainKillMargin = 3 * time.Second

// errDraining is the cancel cause of a job cut at the end of the grace.
var errDraining = errors.New("worker: shutting down; the job was killed at the end of the drain grace and goes back to the queue")

// drainer tracks running handlers and cuts them at the end of the grace.
type drainer struct {
	mu     sync.Mutex
	ctx    context.Context // canceled at the end of the grace
	cancel context.CancelCauseFunc
	timer  *time.Timer
	began  bool          // the drain has begun: start no new job
	n      int           // handlers running
	idle   chan struct{} // closed when n drops to 0, if someone waits
}

// reset prepares the drainer for a new run (Start).
func (d *drainer) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctx, d.cancel = context.WithCancelCause(context.Background())
	d.timer, d.began = nil, false
}

// draining reports whether the drain has begun.
func (d *drainer) draining() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.began
}

// begin starts the grace: after it, running handlers are cut.
func (d *drainer) begin(grace time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.began = true
	if d.cancel != nil && d.timer == nil {
		cancel := d.cancel
		d.timer = time.AfterFunc(grace, func() { cancel(errDraining) })
	}
}

// wait returns once no handler runs (true), or after timeout (false), and
// then ends the drain context.
func (d *drainer) wait(timeout time.Duration) bool {
	d.mu.Lock()
	var idle chan struct{}
	if d.n > 0 {
		idle = make(chan struct{})
		d.idle = idle
	}
	d.mu.Unlock()
	ok := true
	if idle != nil {
		t := time.NewTimer(timeout)
		select {
		case <-idle:
		case <-t.C:
			ok = false
		}
		t.Stop()
	}
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
	}
	if d.cancel != nil {
		d.cancel(errDraining)
	}
	d.mu.Unlock()
	return ok
}

func (d *drainer) enter() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if d.ctx == nil {
		return context.Background()
	}
	return d.ctx
}

func (d *drainer) exit() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n--
	if d.n == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// drainable is the middleware that ends a running job at the end of the
// drain grace (see drainKillMargin) and counts running handlers, so that
// Stop can wait for every container to be destroyed before it stops the
// sandbox runtime.
func (w *Worker) drainable(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if w.drain.draining() {
			// asynq's processor dequeued this task as the drain began: do
			// not start it. Hold it, as a cut job is held, until asynq's
			// shutdown re-queues it (at grace + drainKillMargin), so that
			// another worker runs it and no retry is counted.
			id, _ := asynq.GetTaskID(ctx)
			w.log.Info("draining: a task claimed as the drain began goes back to the queue", "task", id)
			holdUntilRequeued(ctx, w.cfg.ShutdownTimeout+drainKillMargin)
			return errDraining
		}
		dctx := w.drain.enter()
		defer w.drain.exit()
		hctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(dctx, func() { cancel(context.Cause(dctx)) })
		defer stop()
		err := next.ProcessTask(hctx, t)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(hctx), errDraining) {
			// The container is gone: hold the task until asynq's shutdown
			// re-queues it (it does so at grace + drainKillMargin and then
			// ends ctx); returning now would count a retry instead.
			holdUntilRequeued(ctx, drainKillMargin)
		}
		return err
	})
}

// holdUntilRequeued returns when asynq's shutdown ends ctx (it re-queues
// the task first), or 5 s after the shutdown should have come, in within.
func holdUntilRequeued(ctx context.Context, within time.Duration) {
	hold := time.NewTimer(within + 5*time.Second)
	defer hold.Stop()
	select {
	case <-ctx.Done():
	case <-hold.C:
	}
}
