// Package scheduler moves submitted jobs from JetStream into asynq.
//
// Any number of Schedulers share one durable pull consumer
// (job.ConsumerSchedulers) on each tenant's stream of submissions,
// job.JobsStream(tenant). For each submission a Scheduler decodes and validates the
// spec against the operator's caps, then either records a terminal
// `rejected` result (results.Store) or enqueues an asynq task whose TaskID
// is the job id, and acknowledges the JetStream message only after Redis
// accepted the task (or the message's outcome is otherwise recorded).
//
// # Exactly once
//
// A job id is scheduled at most once within the retention period, whatever
// the number of submissions, schedulers and redeliveries:
//
//   - the client sets Nats-Msg-Id to the job id: JetStream drops a
//     resubmission within the stream's duplicate window;
//   - a job whose result already exists is a duplicate (acked, not enqueued);
//   - the first submission of an id claims it in Redis (results.Store.Claim)
//     with a token naming its JetStream message (stream, sequence, time); a
//     redelivery of that message keeps the claim, any other message carrying
//     the same id is a duplicate, even in another queue, and an invalid
//     resubmission cannot overwrite the running job's result with `rejected`;
//   - asynq refuses a second task with the same TaskID in the same queue
//     (ErrTaskIDConflict) while the task exists, including TaskRetention
//     after it completed.
//
// An id absent from the spec is taken from the Nats-Msg-Id header, else
// derived from the message ("j-<stream seq>-<stored time, base 36>";
// "rej-…" for a rejected one), so a redelivery never creates a second job.
//
// # Acks and failures
//
// The message is acked (with a confirmed DoubleAck) only after the task is
// in Redis, or the job's terminal result (rejected, canceled) is recorded
// and published, or it is known to be a duplicate. Any failure talking to
// Redis leaves the message unacked: it is NAKed with an exponential backoff
// (Config.BackoffMin to BackoffMax) and redelivered, so nothing is lost while
// Redis is down. The server-side MaxDeliver is unlimited; instead, once a
// message has been delivered Config.MaxDeliver times and the enqueue still
// fails, the scheduler records an `infra` result for the job and terminates
// the message. If recording fails too (Redis is down), the message stays
// and is retried: it never loops forever once Redis answers, and it is never
// dropped without a result.
//
// # Shutdown
//
// Stop stops pulling, finishes the messages in flight and those already
// buffered, and gives up after Config.ShutdownTimeout, leaving the rest
// unacked for redelivery to another scheduler. Stop must run before the NATS
// connection and Redis clients are closed.
package scheduler
