package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
	cfg.Spans = func(ctx context.Context, id string) ([]gateway.Span, error) { return readSpans(ctx, spanFile, id) }
	rdb, err := connectRedis(ctx, g, g.redisURL)
	if err != nil {
		log.Warn("gateway: no fleet view (GET /v1/fleet answers 503)", "err", err)
		return
	}
	context.AfterFunc(ctx, func() { _ = rdb.Close() })
	fv := &fleetView{rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), store: results.NewStore(rdb, js, results.StoreConfig{}), prefix: "paddock:"}
	cfg.Fleet = func(ctx context.Context, tenant string) (any, error) { return fv.read(ctx, tenant) }
}

// maxSpanScan bounds what one trace request reads of the span file: its
// last maxSpanScan bytes, read once. A job whose spans were written
// before them (older than the last 8 MiB of spans, some thousands of
// jobs) shows no trace.
const maxSpanScan = 8 << 20

// spanReads bounds the trace requests that read at once (each holds up to
// maxSpanScan bytes).
var spanReads = make(chan struct{}, 2)

// readSpans is the spans of job id's traces in the span file's tail (none
// when the file does not exist yet).
func readSpans(ctx context.Context, path, id string) ([]gateway.Span, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readSpanTail(ctx, f, st.Size(), id, maxSpanScan)
}

// readSpanTail reads the last limit bytes of a span file of size once
// and returns the spans of the traces of job id in them: a trace is the
// job's when one of its spans has the job's id (telemetry.AttrJobID); then
// all its spans are the job's.
func readSpanTail(ctx context.Context, r io.ReaderAt, size int64, id string, limit int64) ([]gateway.Span, error) {
	select {
	case spanReads <- struct{}{}:
		defer func() { <-spanReads }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	off := max(0, size-limit)
	buf := make([]byte, size-off)
	n, err := r.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read spans: %w", err)
	}
	buf = buf[:n]
	if off > 0 { // the first line is cut: skip it
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		} else {
			buf = nil
		}
	}
	traces := map[string]bool{}
	quoted := []byte(`"` + id + `"`) // a job id needs no escaping (job.CheckID)
	forLines(buf, func(line []byte) {
		if !bytes.Contains(line, quoted) {
			return
		}
		if rec, ok := decodeSpan(line); ok && rec.Attributes[string(telemetry.AttrJobID)] == id {
			traces[rec.TraceID] = true
		}
	})
	var out []gateway.Span
	if len(traces) == 0 {
		return out, nil
	}
	forLines(buf, func(line []byte) {
		i := bytes.Index(line, []byte(`"trace_id":"`))
		if i < 0 {
			return
		}
		rest := line[i+len(`"trace_id":"`):]
		if j := bytes.IndexByte(rest, '"'); j < 0 || !traces[string(rest[:j])] {
			return
		}
		if r, ok := decodeSpan(line); ok && traces[r.TraceID] {
			out = append(out, gateway.Span{TraceID: r.TraceID, SpanID: r.SpanID, ParentID: r.ParentSpanID, Name: r.Name,
				Start: r.Start, End: r.End, Status: r.Status, Attrs: r.Attributes})
		}
	})
	slices.SortStableFunc(out, func(a, b gateway.Span) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// forLines calls fn with each line of buf.
func forLines(buf []byte, fn func([]byte)) {
	for len(buf) > 0 {
		line := buf
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			line, buf = buf[:i], buf[i+1:]
		} else {
			buf = nil
		}
		fn(line)
	}
}

// decodeSpan decodes one line of the span file (a torn line is not ok).
func decodeSpan(line []byte) (telemetry.SpanRecord, bool) {
	var r telemetry.SpanRecord
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	return r, dec.Decode(&r) == nil && r.TraceID != ""
}

// fleetView reads GET /v1/fleet's facts for one tenant: what is its own
// (its jobs by queue, its reasons over the last hour, from the job index)
// and what is fleet-wide and anonymous (how many workers beat, their
// capacity). No host name, worker id, pid, other tenant's name or other
// tenant's count: queue depths and the fleet's reason counts are sums of
// every tenant's jobs, so a tenant sees only its own share of them. There
// is no operator view at the gateway (its tokens are all tenants').
type fleetView struct {
	rdb    redis.UniversalClient
	insp   *asynq.Inspector
	store  *results.Store
	prefix string // the workers' Redis key prefix (worker.Config.KeyPrefix)
}

type fleetBody struct {
	Tenant   string                `json:"tenant"`
	Workers  []fleetWorker         `json:"workers"`
	Capacity fleetCapacity         `json:"capacity"`
	Queues   []fleetQueue          `json:"queues"`
	Reasons  []results.ReasonCount `json:"reasons"`
	// Partial says the tenant's counts stopped at the scan's bound
	// (fleetScan): they are lower bounds.
	Partial bool `json:"partial,omitempty"`
}

// fleetWorker is one worker, anonymous.
type fleetWorker struct {
	Alive          bool  `json:"alive"`
	HeartbeatAgeMS int64 `json:"heartbeat_age_ms"`
}

// fleetCapacity is the fleet's size: workers alive and their job slots.
type fleetCapacity struct {
	WorkersAlive int `json:"workers_alive"`
	Slots        int `json:"slots"`
}

// fleetQueue is the tenant's own jobs in one queue.
type fleetQueue struct {
	Name          string `json:"name"`
	Queued        int    `json:"queued"`
	Running       int    `json:"running"`
	EndedLastHour int    `json:"ended_last_hour"`
	FailedLastHr  int    `json:"failed_last_hour"`
}

// fleetScan bounds the summaries one fleet view reads of the tenant's
// jobs: one list page of queued and one of running jobs, and the jobs
// that changed within the hour in pages of job.MaxListLimit, at most
// fleetScan of those.
const fleetScan = 1000

func (v *fleetView) read(ctx context.Context, tenant string) (fleetBody, error) {
	body := fleetBody{Tenant: tenant, Workers: []fleetWorker{}, Queues: []fleetQueue{}, Reasons: []results.ReasonCount{}}
	var err error
	if body.Workers, err = v.workers(ctx); err != nil {
		return body, err
	}
	for _, w := range body.Workers {
		if w.Alive {
			body.Capacity.WorkersAlive++
		}
	}
	servers, err := v.insp.Servers()
	if err != nil {
		return body, fmt.Errorf("queue servers: %w", err)
	}
	for _, s := range servers {
		body.Capacity.Slots += s.Concurrency
	}
	queues := map[string]*fleetQueue{}
	q := func(name string) *fleetQueue {
		if queues[name] == nil {
			queues[name] = &fleetQueue{Name: name}
		}
		return queues[name]
	}
	for _, st := range []job.State{job.StateQueued, job.StateRunning} {
		page, err := v.store.List(ctx, job.ListQuery{Tenant: tenant, State: st, Limit: job.MaxListLimit})
		if err != nil {
			return body, err
		}
		body.Partial = body.Partial || page.NextCursor != ""
		for _, j := range page.Jobs {
			if st == job.StateQueued {
				q(j.Queue).Queued++
			} else {
				q(j.Queue).Running++
			}
		}
	}
	if err := v.ended(ctx, &body, q); err != nil {
		return body, err
	}
	for _, name := range slices.Sorted(maps.Keys(queues)) {
		body.Queues = append(body.Queues, *queues[name])
	}
	return body, nil
}

// ended counts the tenant's jobs that ended within the last hour, by
// queue and by reason per 5 minutes (the index's reason buckets).
func (v *fleetView) ended(ctx context.Context, body *fleetBody, q func(string) *fleetQueue) error {
	since := time.Now().Add(-time.Hour)
	seen := map[string]bool{}
	buckets := map[int64]map[string]int{}
	from := since
	for read := 0; read < fleetScan; {
		sums, err := v.store.Changes(ctx, body.Tenant, from, job.MaxListLimit)
		if err != nil {
			return err
		}
		read += len(sums)
		for _, j := range sums {
			if seen[j.ID] || j.FinishedAt.Before(since) || !j.State.Terminal() {
				continue
			}
			seen[j.ID] = true
			qs := q(j.Queue)
			qs.EndedLastHour++
			if j.State != job.StateSucceeded && j.State != job.StateCanceled {
				qs.FailedLastHr++ // failed, rejected, infra: as the page's chart counts them
			}
			b := j.FinishedAt.UnixMilli() / reasonBucket.Milliseconds()
			if buckets[b] == nil {
				buckets[b] = map[string]int{}
			}
			buckets[b][string(j.Reason)]++
		}
		if len(sums) < job.MaxListLimit {
			break
		}
		if next := sums[len(sums)-1].UpdatedAt; next.After(from) {
			from = next
		} else {
			from = from.Add(time.Microsecond) // one microsecond held a whole page
		}
		body.Partial = body.Partial || read >= fleetScan
	}
	for _, b := range slices.Sorted(maps.Keys(buckets)) {
		body.Reasons = append(body.Reasons, results.ReasonCount{Start: time.UnixMilli(b * reasonBucket.Milliseconds()).UTC(), Counts: buckets[b]})
	}
	return nil
}

// reasonBucket is the width of a reason count's window (the index's).
const reasonBucket = 5 * time.Minute

// workers are the workers that beat within the last hour (worker
// heartbeat.go: <prefix>workers, score the last beat in Unix ms, and
// <prefix>worker:<id> while alive), without their ids (a host name).
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
		out = append(out, fleetWorker{Alive: alive[i].Val() == 1, HeartbeatAgeMS: max(0, now.UnixMilli()-int64(z.Score))})
	}
	// Youngest beat first: the order says nothing of which worker is which.
	slices.SortFunc(out, func(a, b fleetWorker) int { return cmp.Compare(a.HeartbeatAgeMS, b.HeartbeatAgeMS) })
	return out, nil
}
