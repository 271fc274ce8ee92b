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
// The Store is Paddock's one home in Redis, as asynq's internal/rdb is
// asynq's: every Paddock key is read and written by its methods, one file
// per concern, and the scheduler and the worker reach each concern through
// a small interface they declare, listing only the methods they call:
//
//   - record.go: the terminal result (Record, Get, Finished), and a run's
//     result fenced by its run token (RecordRun: stored only while the run
//     is still the job's, recordrun.lua);
//   - claims.go: the id claim that stops two different submissions with
//     the same id from both being scheduled (Claim);
//   - cancel.go: the cancel flag (Cancel, Canceled);
//   - runs.go: run counts and ownership, which the rescuer
//     (internal/asynqx) reads (BeginRun, BeginRunAs, EndRun, TaskOf);
//   - admission.go: the tenants' fleet-wide rate window (Admit);
//   - index.go: the job index behind the job list (Queued, List, Changes,
//     Reasons);
//   - republish.go: results whose publish failed (RepublishPending, the
//     Republisher).
//
// Redis keys, all prefixed with StoreConfig.KeyPrefix and expiring after
// StoreConfig.Retention unless said otherwise:
//
//	<prefix>result:<key>         the authoritative Result JSON
//	<prefix>claim:<key>          which submission owns the id
//	<prefix>cancel:<key>         present when the job was canceled
//	<prefix>runs:<key>           how many times a worker started the job
//	<prefix>task:<key>           the asynq task id carrying the job, once a rescue moved it
//	<prefix>active:<worker>      hash: the worker's runs, key → "run|task id|queue"
//	<prefix>active               set: the workers with an active hash
//	<prefix>retire               set: rescued originals to take out of asynq's active list (internal/asynqx)
//	<prefix>rate:<tenant>:<sec>  jobs of the tenant admitted in that second (2 s)
//	<prefix>unpublished          zset: keys of results whose publish failed
//	<prefix>idx{idx}:...         the job index (index.go)
//
// <key> is a job key, job.Key(tenant, id). The worker's heartbeat
// (<prefix>worker:<id>) is the worker's own key.
package results
