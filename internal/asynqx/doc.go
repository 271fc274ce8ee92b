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
// The worker's rescuer (worker/rescue.go) also leans on asynq's behaviour
// (it re-enqueues a dead worker's runs as "<key>#rescue-<run>" tasks beside
// asynq's own recoverer) but through asynq's public Client; it is not here
// yet.
package asynqx
