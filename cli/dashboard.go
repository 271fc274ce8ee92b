package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

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
func dashboardHooks(ctx context.Context, g *globals, f *gatewayFlags, js jetstream.JetStream, cfg *gateway.Config, log *slog.Logger) error {
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
	return operatorHook(ctx, g, f, rdb, cfg)
}

// operatorHook gives the gateway its operator fleet page when an operator
// token is set (--gateway-operator-token-file): scheduler.OperatorView
// over the gateway's Redis, and, only when given, the streams as an admin
// user (--gateway-operator-creds) and the servers over a system user
// (--gateway-system-creds). Its connections close when ctx ends.
func operatorHook(ctx context.Context, g *globals, f *gatewayFlags, rdb redis.UniversalClient, cfg *gateway.Config) error {
	if f.operatorTokenFile == "" {
		return nil
	}
	if err := checkSecretFile(f.operatorTokenFile); err != nil {
		return fmt.Errorf("--gateway-operator-token-file: %w", err)
	}
	b, err := os.ReadFile(f.operatorTokenFile)
	if err != nil {
		return fmt.Errorf("--gateway-operator-token-file: %w", err)
	}
	cfg.OperatorToken = strings.TrimSpace(string(b))
	oc := scheduler.OperatorViewConfig{}
	if fo, ok := sentinelURL(g.redisURL); ok {
		oc.Sentinels, oc.MasterName = sentinelClients(fo.SentinelAddrs, fo), fo.MasterName
	}
	closeNATS := func() {}
	if f.operatorCreds != "" || f.systemCreds != "" {
		// Opt-in: these users may read (admin: write) far more than the
		// gateway's own; an exposed gateway holds them only when told.
		closeNATS = fleetNATS(ctx, g, f.operatorCreds, f.systemCreds, "", &oc)
	}
	context.AfterFunc(ctx, func() { closeNATS(); closeSentinels(oc.Sentinels) })
	v, err := scheduler.NewOperatorView(rdb, oc)
	if err != nil {
		return err
	}
	cfg.OperatorFleet = func(ctx context.Context) (any, error) { return v.Read(ctx) }
	return nil
}
