package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A task asynq canceled (a cancel request) is not retried before the
// interrupted run recorded its result; other failures back off from 1 s.
func TestRetryDelayAfterCancel(t *testing.T) {
	assert.GreaterOrEqual(t, retryDelay(0, context.Canceled, nil), interruptedRetryDelay)
	assert.GreaterOrEqual(t, retryDelay(0, fmt.Errorf("wrapped: %w", context.Canceled), nil), interruptedRetryDelay)
	assert.Less(t, retryDelay(0, errors.New("docker: connection refused"), nil), 5*time.Second)
	assert.Greater(t, interruptedRetryDelay, 15*time.Second, "longer than the detached clean-up (detached)")
}
