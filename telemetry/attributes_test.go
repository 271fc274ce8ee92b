package telemetry_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/telemetry"
)

// The metric attribute keys are the job package's names: one vocabulary.
func TestAttributeKeysMatchJob(t *testing.T) {
	for key, name := range map[attribute.Key]string{
		telemetry.AttrJobID:             job.AttrJobID,
		telemetry.AttrTenant:            job.AttrTenant,
		telemetry.AttrQueue:             job.AttrQueue,
		telemetry.AttrState:             job.AttrState,
		telemetry.AttrReason:            job.AttrReason,
		telemetry.AttrAttempt:           job.AttrAttempt,
		telemetry.AttrHealAction:        job.AttrHealAction,
		telemetry.AttrHealOutcome:       job.AttrHealOutcome,
		telemetry.AttrHealEvent:         job.AttrHealEvent,
		telemetry.AttrSubmissionOutcome: job.AttrSubmissionOutcome,
		telemetry.AttrLeaseAcquired:     job.AttrLeaseHeld,
		telemetry.AttrStream:            job.AttrStream,
	} {
		assert.Equal(t, name, string(key))
	}
}
