package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

// BenchmarkSchedule measures submission → task in Redis, end to end, with
// the default concurrency. The test Redis fsyncs every write
// (appendfsync always), which dominates.
func BenchmarkSchedule(b *testing.B) {
	s := newSetup(b)
	cfg := testConfig()
	cfg.Concurrency = 0 // default
	specs := make([]job.Spec, b.N)
	for i := range specs {
		specs[i] = job.Spec{Command: fmt.Sprintf("echo %d", i)}
	}
	_, err := s.client.SubmitBatch(context.Background(), specs, nil)
	require.NoError(b, err)
	b.ResetTimer()
	s.scheduler(s.asynq, cfg)
	require.Eventually(b, func() bool { return s.jobsInStream() == 0 }, wait, time.Millisecond)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
