package worker

// Wake-ups: with Config.Wakeups the worker's asynq servers dequeue through
// an asynqx.Gate (internal/asynqx: every place Paddock relies on asynq's
// internals), which holds an idle processor until a wake-up or its
// backstop instead of polling Redis.

// Wake tells the worker that a job was just enqueued on queue: an idle
// worker asks Redis for it at once instead of at its next poll. The caller
// subscribes to job.WakeSubject (Build does, on NATS). Without
// Config.Wakeups it does nothing.
func (w *Worker) Wake(queue string) {
	if g := w.gate.Load(); g != nil {
		g.Wake(queue)
	}
}
