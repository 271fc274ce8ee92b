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
// Build makes a worker from the fleet's connections (the sandbox runtime
// over Docker, agent I/O and the wake-up subscription over NATS); New
// takes a runtime made by the caller. Both refuse a Config whose heartbeat
// TTL does not outlast the sandbox watchdog by WatchdogMargin
// (ErrHeartbeatTTL; CheckHeartbeatTTL runs that check alone, as
// cmd/paddock does on its flags before it connects).
package worker
