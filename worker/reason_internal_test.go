package worker

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
)

// Every reason the sandbox can end a command with is the job.Reason of
// the same name; anything else becomes infra, never an unknown reason.
func TestSandboxReasonsAreJobReasons(t *testing.T) {
	for _, r := range sandbox.Reasons() {
		assert.True(t, job.Reason(r).Valid(), "sandbox reason %q is no job.Reason", r)
		assert.Equal(t, job.Reason(r), jobReason(r))
	}
	assert.Equal(t, job.ReasonInfra, jobReason(sandbox.Reason("made-up")))
}
