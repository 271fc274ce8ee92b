package cli

import (
	"context"
	"log/slog"

	"github.com/hibiken/asynq"

	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

// startControl starts what runs next to every scheduler besides intake:
// the cancel responder (cancel.go), the job list responder (dashboard.go),
// the periodic-job ticker (periodic.go), the sweeper that records `infra`
// for jobs the queue gave up on without a result, and the republisher of
// results stored while NATS was down. stop stops them, intake-first.
func startControl(ctx context.Context, s *stack, cf *capsFlags, pf *periodicFlags, log *slog.Logger) (stop func(), err error) {
	canc, err := startCanceler(ctx, s, cf, log)
	if err != nil {
		return nil, err
	}
	lister, err := startLister(ctx, s, log) // dashboard.go
	if err != nil {
		canc.Stop()
		return nil, err
	}
	stopTicker, err := pf.start(ctx, s, log)
	if err != nil {
		lister.Stop()
		canc.Stop()
		return nil, err
	}
	sw, err := scheduler.NewSweeper(asynq.NewInspectorFromRedisClient(s.rdb), s.st,
		scheduler.SweeperConfig{Queues: cf.caps().Queues, Logger: log})
	if err == nil {
		err = sw.Start(ctx)
	}
	if err != nil {
		stopTicker()
		lister.Stop()
		canc.Stop()
		return nil, err
	}
	rp := results.NewRepublisher(s.st, 0)
	_ = rp.Start(ctx)
	return func() {
		stopTicker()
		lister.Stop()
		canc.Stop()
		sw.Stop()
		rp.Stop()
	}, nil
}
