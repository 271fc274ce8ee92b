// Package asynqx holds the places where Paddock relies on asynq's
// internals rather than its API, so that an asynq upgrade is one package's
// audit. It was written against asynq v0.26.0, which
// TestWrittenAgainstAsynqV0260 pins: that test fails when go.mod moves
// asynq, and says what to check before changing the pin.
//
// Today that is the wake gate (wakegate.go): an asynq processor sleeps
// between empty polls and asynq has no API to interrupt that sleep, so the
// gate wraps the Redis client asynq is given and recognizes asynq's dequeue
// script by its keys (rdb.Dequeue's pending, paused, active and lease keys
// of one queue). TestWakeGateSeesDequeues fails when an upgrade changes
// them. The gate could be deleted if asynq let a caller wake an idle
// processor (say, a Server method that ends the processor's sleep for a
// queue, or a Config channel the processor selects on beside its timer).
//
// The rescuer (rescue.go) is a second crash recovery beside asynq's own: it
// re-enqueues a dead worker's runs as "<key>#rescue-<run>" tasks within
// seconds, where asynq's recoverer takes one to two minutes, and relies on
// asynq for the rest (task-id uniqueness, the active task's hash that
// Inspector.GetTaskInfo reads, the layout of active and completed tasks,
// which its retirement of the dead worker's original task edits once that
// task's lease expired, and otherwise the recoverer's later retry of the
// original task, which the worker then completes without running). Its doc
// lists those, and Paddock's keys it reads. TestAsynqLeasesAnActiveTask,
// TestAsynqRecoversAnExpiredLease and TestAsynqCompletedLayout
// (asynq_test.go) pin asynq's side with a real asynq server on a real
// Redis: the active list, the lease set and its expiry, the task hash and
// its state, the completed set, the id conflict, the recoverer's move to
// retry. It could be deleted if asynq made its lease duration and
// recoverer interval Config fields (docs/reliability.md, "Upstream asynq
// change we would propose"): a lease of a few seconds would make asynq's
// own recovery as quick. The worker uses it through a Start/Stop interface
// and keeps its self-fence (worker/fence.go).
//
// LostTasks (lost.go) is what the scheduler asks after a Redis failover:
// which held jobs have no task any more (asynq's task hash key) and which
// queues asynq's queue set forgot. TestLostTasksFindsWhatRedisLost pins
// both keys; an Inspector.TaskExists and an inspector that lists queues
// from their keys would let it go.
package asynqx
