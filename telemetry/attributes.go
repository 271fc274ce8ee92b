package telemetry

import "go.opentelemetry.io/otel/attribute"

// Attribute keys shared by spans and metrics. Span attributes use the same
// keys as metric attributes so a trace and a dashboard speak one vocabulary.
const (
	// AttrJobID is set on every span that belongs to a job; [ReadSpans] finds
	// a job's trace through it.
	AttrJobID attribute.Key = "paddock.job.id"
	// AttrTenant is the job's tenant (a bounded label: the operator makes
	// tenants).
	AttrTenant attribute.Key = "paddock.tenant"
	// AttrQueue is the asynq queue a job ran on (metric attribute; spans use
	// messaging.destination.name).
	AttrQueue attribute.Key = "paddock.queue"
	// AttrState is the coarse terminal state (succeeded, failed, ...).
	AttrState attribute.Key = "paddock.job.state"
	// AttrReason is the one terminal reason (ok, timeout, oom, ...).
	AttrReason attribute.Key = "paddock.job.reason"
	// AttrAttempt is the 1-based attempt number inside the job's container.
	AttrAttempt attribute.Key = "paddock.attempt"
	// AttrHealAction is the repair the heal loop chose (install, rule, llm, ...).
	AttrHealAction attribute.Key = "paddock.heal.action"
	// AttrHealOutcome is what that repair led to (fixed, failed, ...).
	AttrHealOutcome attribute.Key = "paddock.heal.outcome"
	// AttrExitCode is the command's exit code (semconv process.exit.code).
	AttrExitCode attribute.Key = "process.exit.code"
	// AttrSubmissionOutcome is accepted, rejected or duplicate.
	AttrSubmissionOutcome attribute.Key = "paddock.submission.outcome"
	// AttrLeaseAcquired tells whether a lease wait ended with the lease held.
	AttrLeaseAcquired attribute.Key = "paddock.lease.acquired"
)

// Submission outcomes for [Metrics.Submission].
const (
	SubmissionAccepted  = "accepted"
	SubmissionRejected  = "rejected"
	SubmissionDuplicate = "duplicate"
)

// scopeName is the instrumentation scope of the spans and metrics this
// package records itself (the asynq middleware).
const scopeName = "github.com/paddockhq/paddock/telemetry"
