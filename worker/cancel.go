package worker

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
)

// cancelPollInterval is how often a running job's cancel flag is read. The
// scheduler's cancel responder also interrupts the handler at once through
// asynq (CancelProcessing, a Redis pub/sub message); the poll stops the job
// when that message is lost (the worker was reconnecting to Redis).
const cancelPollInterval = 500 * time.Millisecond

// errCanceled is the cancel cause of a job whose cancel flag was seen.
var errCanceled = errors.New("worker: job canceled by request")

// CancelFlags is the part of *results.Store that reads a job's cancel
// flag, polled while the job runs and read once more when it is
// interrupted.
type CancelFlags interface {
	Canceled(ctx context.Context, key string) (bool, error)
}

// watchCancel is the middleware that cancels a running job's context when
// its cancel flag is set. ProcessTask then kills the container and records
// the result `canceled`.
func (w *Worker) watchCancel(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		id = jobKey(id) // a rescue task carries the job's key with a suffix (fence.go)
		ctx, cancel := context.WithCancelCause(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(cancelPollInterval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if c, err := w.flags.Canceled(ctx, id); err == nil && c {
					w.log.InfoContext(ctx, "cancel requested; killing the job", "job", id)
					cancel(errCanceled)
					return
				}
			}
		}()
		defer func() {
			cancel(nil)
			<-done
		}()
		return next.ProcessTask(ctx, t)
	})
}
