package cli

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/gateway"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/telemetry"
)

// The dashboard's data (issue 16): the list service next to every
// scheduler, and the gateway's span and fleet hooks.

// startLister answers job list requests next to a scheduler (any number of
// schedulers share them through a queue group).
func startLister(ctx context.Context, s *stack, log *slog.Logger) (*scheduler.Lister, error) {
	l, err := scheduler.NewLister(s.nc, s.st, scheduler.ListerConfig{Logger: log})
	if err != nil {
		return nil, err
	}
	if err := l.Start(ctx); err != nil {
		return nil, fmt.Errorf("job list responder on %s: %w", job.SubjectJobsRequests, err)
	}
	return l, nil
}

// dashboardHooks gives the gateway its trace hook (the tail of the span
// file <data-dir>/spans.jsonl, which `paddock up` writes:
// telemetry.SpanTail) and its fleet view (Redis: scheduler.FleetView).
// Without Redis the fleet view is left out, with a warning; the client is
// closed when ctx ends.
func dashboardHooks(ctx context.Context, g *globals, js jetstream.JetStream, cfg *gateway.Config, log *slog.Logger) error {
	tail, err := telemetry.NewSpanTail(filepath.Join(g.dataDirPath(), "spans.jsonl"), telemetry.SpanTailConfig{})
	if err != nil {
		return err
	}
	cfg.Spans = func(ctx context.Context, id string) ([]gateway.Span, error) {
		recs, err := tail.Job(ctx, id)
		var out []gateway.Span
		for _, r := range recs {
			out = append(out, gateway.Span{TraceID: r.TraceID, SpanID: r.SpanID, ParentID: r.ParentSpanID, Name: r.Name,
				Start: r.Start, End: r.End, Status: r.Status, Attrs: r.Attributes})
		}
		return out, err
	}
	rdb, err := connectRedis(ctx, g, g.redisURL)
	if err != nil {
		log.Warn("gateway: no fleet view (GET /v1/fleet answers 503)", "err", err)
		return nil
	}
	context.AfterFunc(ctx, func() { _ = rdb.Close() })
	fv, err := scheduler.NewFleetView(rdb, results.NewStore(rdb, js, results.StoreConfig{}), scheduler.FleetViewConfig{})
	if err != nil {
		return err
	}
	cfg.Fleet = func(ctx context.Context, tenant string) (any, error) { return fv.Read(ctx, tenant) }
	return nil
}
