package main

import (
	"context"
	"log/slog"
)

// startControl starts what runs next to every scheduler besides intake:
// the cancel responder (cancel.go) and the periodic-job ticker
// (periodic.go). stop stops them, intake-first.
func startControl(ctx context.Context, s *stack, cf *capsFlags, pf *periodicFlags, log *slog.Logger) (stop func(), err error) {
	canc, err := startCanceler(ctx, s, cf, log)
	if err != nil {
		return nil, err
	}
	stopTicker, err := pf.start(ctx, s, log)
	if err != nil {
		canc.Stop()
		return nil, err
	}
	return func() {
		stopTicker()
		canc.Stop()
	}, nil
}
