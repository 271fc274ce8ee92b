package healer_test

import (
	"context"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
)

// sessionExec adapts a sandbox.Session to healer.Executor: the code the
// worker uses (worker/healexec.go).
type sessionExec struct {
	sess        *sandbox.Session
	dir         string // the job's workdir ("" = /workspace)
	outputBytes int64  // the job's output cap per stream
}

func (e *sessionExec) Exec(ctx context.Context, c healer.Command) (healer.Outcome, error) {
	o, err := e.sess.Run(ctx, sandbox.Command{
		Script: c.Script, Env: c.Env, Dir: e.dir, Timeout: c.Timeout, OutputBytes: e.outputBytes,
	})
	return healer.Outcome{
		ExitCode: o.ExitCode, Reason: job.Reason(o.Reason),
		Stdout: outputText(o.Stdout), Stderr: outputText(o.Stderr),
		StdoutBytes: o.Stdout.Bytes, StderrBytes: o.Stderr.Bytes,
		Duration: o.Duration, Detail: o,
	}, err
}

// outputText is a stream's text: whole, or head and tail around a marker.
func outputText(o sandbox.Output) string {
	if !o.Truncated {
		return string(o.Head)
	}
	return string(o.Head) + "\n…\n" + string(o.Tail)
}
