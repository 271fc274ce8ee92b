package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
)

// Healer runs a job's command under the self-healing loop (*healer.Loop).
type Healer interface {
	Run(ctx context.Context, ex healer.Executor, spec job.Spec, policy job.HealPolicy, cmdTimeout time.Duration) (healer.Result, error)
}

// sessionExec adapts a job's sandbox.Session to healer.Executor.
type sessionExec struct {
	sess        *sandbox.Session
	dir         string // the job's workdir ("" = /workspace)
	outputBytes int64  // the job's output cap per stream
	io          *runIO // the run's agent I/O
	ctx         context.Context
	// spill, when set, is the job id whose commands spill their output
	// into the workspace (output.spill), bounded by spillMax; each
	// command's account goes to res.Spilled (the last one stays).
	spill    string
	spillMax int64
	res      *job.Result
}

// Exec runs one command of the heal loop (the job's, an installer, a
// repair) in the job's container.
func (e *sessionExec) Exec(ctx context.Context, c healer.Command) (healer.Outcome, error) {
	cmd := sandbox.Command{Script: c.Script, Env: c.Env, Dir: e.dir, Timeout: c.Timeout, OutputBytes: e.outputBytes}
	if e.spill != "" && !c.Install {
		cmd.Spill, cmd.SpillMax = e.spill, e.spillMax
		if e.spillMax < 0 {
			cmd.Spill = "" // the workspace is at its quota: nothing to spill into
		}
	}
	ended := e.io.command(e.ctx, &cmd, c)
	o, err := e.sess.Run(ctx, cmd)
	ended()
	switch {
	case cmd.Spill != "":
		e.res.Spilled = spilled(e.spill, o)
	case e.spill != "" && !c.Install:
		e.res.Spilled = spilled(e.spill, o)
		e.res.Spilled.Stdout.Error = "not spilled: the workspace is at its quota"
		e.res.Spilled.Stderr.Error = e.res.Spilled.Stdout.Error
	}
	return healer.Outcome{
		ExitCode: o.ExitCode, Reason: jobReason(o.Reason),
		Stdout: outputText(o.Stdout), Stderr: outputText(o.Stderr),
		StdoutBytes: o.Stdout.Bytes, StderrBytes: o.Stderr.Bytes,
		Duration: o.Duration, Detail: o,
	}, err
}

// jobReason is the job.Reason of a command's sandbox.Reason (the same
// name: TestSandboxReasonsAreJobReasons). A name that is none would be a
// bug in the sandbox: the command's end is then the fleet's failure
// (infra), never a reason the result's readers cannot know.
func jobReason(r sandbox.Reason) job.Reason {
	if jr := job.Reason(r); jr.Valid() {
		return jr
	}
	return job.ReasonInfra
}

// outputText is a stream's text: whole, or head and tail around a marker.
func outputText(o sandbox.Output) string {
	if !o.Truncated {
		return string(o.Head)
	}
	return string(o.Head) + "\n…\n" + string(o.Tail)
}

// SandboxSpanAttributes adds the sandbox's own counters to the heal loop's
// attempt spans (healer.Config.SpanAttributes).
func SandboxSpanAttributes(o healer.Outcome) []attribute.KeyValue {
	so, ok := o.Detail.(sandbox.Outcome)
	if !ok {
		return nil
	}
	return []attribute.KeyValue{
		attribute.Bool(job.AttrOutputTruncated, so.Stdout.Truncated || so.Stderr.Truncated),
		attribute.Int64(job.AttrOOMKills, so.OOMKills), attribute.Int(job.AttrLeftover, so.Leftover),
	}
}

// spilled is the result's account of one command's spill files.
func spilled(id string, o sandbox.Outcome) *job.Spilled {
	return &job.Spilled{
		Stdout: job.SpillFile{Path: job.SpillPath(id, "stdout"), Bytes: o.SpillBytes[0], Error: o.SpillErr[0]},
		Stderr: job.SpillFile{Path: job.SpillPath(id, "stderr"), Bytes: o.SpillBytes[1], Error: o.SpillErr[1]},
	}
}
