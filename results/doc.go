// Package results is the single place where a job's terminal state is
// decided and made visible.
//
// A Store writes a job's Result to Redis with SET NX (first writer wins, so
// every accepted job ends with exactly one terminal state, whoever finishes
// it: a worker, the scheduler rejecting it, or a cancel) and then publishes
// the stored result on job.ResultSubject(id) in the JetStream stream
// job.StreamResults, where clients read it (last message per subject) before
// and after the job ends. The publish is idempotent (Nats-Msg-Id
// "result-<id>"), so calling Record again after a crash between the Redis
// write and the publish repairs the missing publish.
//
// A result is bounded before it is stored (fit.go, the one trimming rule):
// its JSON encoding, escaping included, is at most StoreConfig.MaxResultBytes
// (1 MiB by default, and never more than one NATS message carries), the
// middle of its outputs cut when it is larger. NATS carries exactly the bytes
// Redis holds.
//
// EnsureStreams creates or updates the two JetStream streams Paddock uses,
// each with a size limit (StreamConfig.JobsMaxBytes, ResultsMaxBytes): a full
// PADDOCK_JOBS refuses new submissions, a full PADDOCK_RESULTS drops its
// oldest results. IsStreamFull recognizes a publish refused for lack of room.
// The Store also keeps the small per-job counters and flags the scheduler
// and worker share: run counts (BeginRun), the cancel flag (Cancel,
// Canceled) and the id claim that stops two different submissions with the
// same id from both being scheduled (Claim).
//
// Redis keys, all prefixed with StoreConfig.KeyPrefix and expiring after
// StoreConfig.Retention:
//
//	<prefix>result:<id>  the authoritative Result JSON
//	<prefix>claim:<id>   which submission owns the id
//	<prefix>runs:<id>    how many times a worker started the job
//	<prefix>cancel:<id>  present when the job was canceled
package results
