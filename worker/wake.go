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

// wakeRescued is the rescuer's wake-up after it enqueued a dead worker's
// job again: like the scheduler after an enqueue, it publishes the wake-up
// (with NATS: Build) so that any idle worker takes the rescue now rather
// than at its backstop poll, and wakes this worker directly too (its NATS
// user may predate the grant to publish wake-ups).
func (w *Worker) wakeRescued(queue string) {
	if w.wakePub != nil {
		w.wakePub(queue)
	}
	w.Wake(queue)
}
