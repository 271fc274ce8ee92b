package job

// Telemetry attribute names of the paddock.* vocabulary, one list for every
// package that records spans or metrics, so that a trace and a dashboard
// speak one language. Spans use attribute.String(job.AttrJobID, id);
// package telemetry (which imports no project package) declares the same
// names as attribute.Key for its metrics, and its tests check that they
// match these.
const (
	AttrJobID   = "paddock.job.id"     // every span of a job; telemetry.ReadSpans finds a trace by it
	AttrTenant  = "paddock.tenant"     // the job's tenant (bounded: one per tenant the operator made)
	AttrQueue   = "paddock.queue"      // the asynq queue
	AttrState   = "paddock.job.state"  // the coarse terminal state
	AttrReason  = "paddock.job.reason" // the one terminal reason
	AttrRun     = "paddock.run"        // the queue's run number of a job (1 = first)
	AttrAttempt = "paddock.attempt"    // 1-based attempt inside the job's container
	AttrOutcome = "paddock.outcome"    // what the scheduler did with a message

	AttrDuplicate         = "paddock.duplicate" // the submission's id was taken already
	AttrSubmissionOutcome = "paddock.submission.outcome"

	AttrHealAction   = "paddock.heal.action"   // the repair chosen
	AttrHealOutcome  = "paddock.heal.outcome"  // what it led to
	AttrHealRule     = "paddock.heal.rule"     // the rule that applied
	AttrHealKind     = "paddock.heal.kind"     // the classified failure
	AttrHealBinary   = "paddock.heal.binary"   // the missing binary
	AttrHealPackages = "paddock.heal.packages" // the packages installed
	AttrHealEvent    = "paddock.heal.event"    // a heal loop event (metrics)

	AttrCommandSHA256    = "paddock.command.sha256" // the command, hashed (never the text)
	AttrCommandTimeoutMS = "paddock.command.timeout_ms"
	AttrStdoutBytes      = "paddock.stdout.bytes"
	AttrStderrBytes      = "paddock.stderr.bytes"
	AttrOutputTruncated  = "paddock.output.truncated"
	AttrOOMKills         = "paddock.oom_kills"
	AttrLeftover         = "paddock.leftover_processes"

	AttrLimitMemoryMB       = "paddock.limits.memory_mb"
	AttrLimitCPUs           = "paddock.limits.cpus"
	AttrLimitPids           = "paddock.limits.pids"
	AttrLimitCommandTimeout = "paddock.limits.command_timeout_s"

	AttrPoolHit    = "paddock.pool.hit"
	AttrVolume     = "paddock.volume"
	AttrVolumeMode = "paddock.volume.mode"
	AttrStream     = "paddock.stream"
	AttrLeaseHeld  = "paddock.lease.acquired"

	// Agent I/O (spans paddock.files.place and paddock.artifacts.collect,
	// and the job's span for kept output).
	AttrFiles            = "paddock.files"       // files placed in the workspace
	AttrFilesBytes       = "paddock.files.bytes" // their bytes
	AttrArtifacts        = "paddock.artifacts"   // artifacts stored
	AttrArtifactsBytes   = "paddock.artifacts.bytes"
	AttrArtifactsRefused = "paddock.artifacts.refused"
	AttrKeptBytes        = "paddock.output.kept_bytes" // kept stdout + stderr
)
