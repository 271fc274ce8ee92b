package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
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

// dashboardHooks gives the gateway its trace hook (the span file
// <data-dir>/spans.jsonl, which `paddock up` writes) and its fleet view
// (Redis: the workers' heartbeats, asynq's queues, the job index's reason
// counts). Without Redis the fleet view is left out, with a warning; the
// client is closed when ctx ends.
func dashboardHooks(ctx context.Context, g *globals, js jetstream.JetStream, cfg *gateway.Config, log *slog.Logger) {
	spanFile := filepath.Join(g.dataDirPath(), "spans.jsonl")
	cfg.Spans = func(_ context.Context, id string) ([]gateway.Span, error) { return readSpans(spanFile, id) }
	rdb, err := connectRedis(ctx, g, g.redisURL)
	if err != nil {
		log.Warn("gateway: no fleet view (GET /v1/fleet answers 503)", "err", err)
		return
	}
	context.AfterFunc(ctx, func() { _ = rdb.Close() })
	fv := &fleetView{rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), store: results.NewStore(rdb, js, results.StoreConfig{}), prefix: "paddock:"}
	cfg.Fleet = func(ctx context.Context) (any, error) { return fv.read(ctx) }
}

// readSpans is the spans of job id's traces in the span file (none when
// the file does not exist yet).
func readSpans(path, id string) ([]gateway.Span, error) {
	recs, err := telemetry.ReadSpans(path, id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]gateway.Span, 0, len(recs))
	for _, r := range recs {
		out = append(out, gateway.Span{TraceID: r.TraceID, SpanID: r.SpanID, ParentID: r.ParentSpanID, Name: r.Name,
			Start: r.Start, End: r.End, Status: r.Status, Attrs: r.Attributes})
	}
	return out, nil
}

// fleetView reads GET /v1/fleet's facts: fleet-wide, never a job's id.
type fleetView struct {
	rdb    redis.UniversalClient
	insp   *asynq.Inspector
	store  *results.Store
	prefix string // the workers' Redis key prefix (worker.Config.KeyPrefix)
}

type fleetBody struct {
	Workers []fleetWorker         `json:"workers"`
	Servers []fleetServer         `json:"servers"`
	Queues  []fleetQueue          `json:"queues"`
	Reasons []results.ReasonCount `json:"reasons"`
}

type fleetWorker struct {
	ID             string `json:"id"`
	Alive          bool   `json:"alive"`
	HeartbeatAgeMS int64  `json:"heartbeat_age_ms"`
}

type fleetServer struct {
	Host        string         `json:"host"`
	PID         int            `json:"pid"`
	Concurrency int            `json:"concurrency"`
	Active      int            `json:"active"`
	Queues      map[string]int `json:"queues"`
	Status      string         `json:"status"`
	Started     time.Time      `json:"started"`
}

type fleetQueue struct {
	Name           string `json:"name"`
	Size           int    `json:"size"`
	Active         int    `json:"active"`
	Pending        int    `json:"pending"`
	Scheduled      int    `json:"scheduled"`
	Retry          int    `json:"retry"`
	Archived       int    `json:"archived"`
	LatencyMS      int64  `json:"latency_ms"`
	Paused         bool   `json:"paused"`
	ProcessedToday int    `json:"processed_today"`
	FailedToday    int    `json:"failed_today"`
}

func (v *fleetView) read(ctx context.Context) (fleetBody, error) {
	body := fleetBody{Workers: []fleetWorker{}, Servers: []fleetServer{}, Queues: []fleetQueue{}, Reasons: []results.ReasonCount{}}
	var err error
	if body.Workers, err = v.workers(ctx); err != nil {
		return body, err
	}
	servers, err := v.insp.Servers()
	if err != nil {
		return body, fmt.Errorf("queue servers: %w", err)
	}
	for _, s := range servers {
		body.Servers = append(body.Servers, fleetServer{Host: s.Host, PID: s.PID, Concurrency: s.Concurrency,
			Active: len(s.ActiveWorkers), Queues: s.Queues, Status: s.Status, Started: s.Started})
	}
	queues, err := v.insp.Queues()
	if err != nil {
		return body, fmt.Errorf("queues: %w", err)
	}
	sort.Strings(queues)
	for _, q := range queues {
		qi, err := v.insp.GetQueueInfo(q)
		if err != nil {
			return body, fmt.Errorf("queue %s: %w", q, err)
		}
		body.Queues = append(body.Queues, fleetQueue{Name: q, Size: qi.Size, Active: qi.Active, Pending: qi.Pending,
			Scheduled: qi.Scheduled, Retry: qi.Retry, Archived: qi.Archived, LatencyMS: qi.Latency.Milliseconds(),
			Paused: qi.Paused, ProcessedToday: qi.Processed, FailedToday: qi.Failed})
	}
	rc, err := v.store.Reasons(ctx, time.Now().Add(-time.Hour))
	if err != nil {
		return body, err
	}
	if rc != nil {
		body.Reasons = rc
	}
	return body, nil
}

// workers are the workers that beat within the last hour (worker
// heartbeat.go: <prefix>workers, score the last beat in Unix ms, and
// <prefix>worker:<id> while alive).
func (v *fleetView) workers(ctx context.Context) ([]fleetWorker, error) {
	now := time.Now()
	zs, err := v.rdb.ZRangeByScoreWithScores(ctx, v.prefix+"workers", &redis.ZRangeBy{
		Min: strconv.FormatInt(now.Add(-time.Hour).UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	alive := make([]*redis.IntCmd, len(zs))
	_, err = v.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, z := range zs {
			alive[i] = p.Exists(ctx, v.prefix+"worker:"+fmt.Sprint(z.Member))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	out := make([]fleetWorker, 0, len(zs))
	for i, z := range zs {
		out = append(out, fleetWorker{ID: fmt.Sprint(z.Member), Alive: alive[i].Val() == 1,
			HeartbeatAgeMS: max(0, now.UnixMilli()-int64(z.Score))})
	}
	return out, nil
}
