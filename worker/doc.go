// Package worker is the asynq side of Paddock: a stateless server that
// claims jobs from Redis, runs each in a fresh sandbox session, and records
// exactly one terminal result per job.
//
// For every task the handler re-validates the spec (never trusting the
// queue), returns the stored result if the job already ended (a re-delivery
// after a crash), honours a cancel flag, takes a never-used container, runs
// the command under the heal loop (Config.Healer; the default heals by rules), records the
// result (Redis first-writer-wins, then NATS), and always destroys the
// container: on success, failure, panic, cancellation and shutdown.
//
// Failures of the machinery (Docker engine, image, init) are kept apart from
// the job's own: they are retried by the queue and end as state "infra" only
// when the retries are spent.
//
// The worker reaches Redis through results.Store, by concern, with the
// narrow interfaces it declares beside their use: ResultStore (Record,
// RecordRun, Get; handler.go, result.go), RunStore (BeginRunAs, EndRun: the run counter and this
// worker's active set; handler.go) and CancelFlags (Canceled; cancel.go).
// Store, what New takes, is their union. A live worker's rescuer
// (internal/asynqx.Rescuer, started with the heartbeat) runs the jobs of
// dead workers again under "<key>#rescue-<run>" task ids and wakes idle
// workers for them (the scheduler's wake-up, published on NATS when Build
// has it: wake.go); a worker that could not renew its heartbeat in time
// fences itself first (fence.go): it kills its running jobs and records
// none of their results, so a rescue never overlaps a run. A run's result
// is written with its run token (results.Store.RecordRun): a run rescued
// after its fence check records nothing (results.ErrStaleRun).
//
// Build makes a worker from the fleet's connections (the sandbox runtime
// over Docker, agent I/O and the wake-up subscription over NATS); New
// takes a runtime made by the caller. Both refuse a Config whose heartbeat
// TTL does not outlast the sandbox watchdog by WatchdogMargin
// (ErrHeartbeatTTL; CheckHeartbeatTTL runs that check alone, as
// cmd/paddock does on its flags before it connects).
package worker
