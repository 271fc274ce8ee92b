package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// FleetViewConfig configures a FleetView. A zero field takes its default.
type FleetViewConfig struct {
	// KeyPrefix is the workers' Redis key prefix (worker.Config.KeyPrefix),
	// under which their heartbeats are. Default "paddock:".
	KeyPrefix string
}

// FleetView reads the dashboard's fleet panel (the gateway's GET
// /v1/fleet) for one tenant from Redis: what is the tenant's own (its jobs
// by queue, its reasons over the last hour, from the job index) and what
// is fleet-wide and anonymous (how many workers beat, their capacity). No
// host name, worker id, pid, other tenant's name or other tenant's count:
// queue depths and the fleet's reason counts are sums of every tenant's
// jobs, so a tenant sees only its own share of them. There is no operator
// view here (the gateway's tokens are all tenants').
type FleetView struct {
	rdb    redis.UniversalClient
	insp   *asynq.Inspector
	store  ListStore
	prefix string
}

// NewFleetView returns a FleetView over rdb (the workers' and asynq's
// Redis) and the job index store. Closing rdb is the caller's.
func NewFleetView(rdb redis.UniversalClient, store ListStore, cfg FleetViewConfig) (*FleetView, error) {
	if rdb == nil || store == nil {
		return nil, fmt.Errorf("%w: nil Redis client or ListStore", ErrConfig)
	}
	return &FleetView{rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), store: store,
		prefix: cmp.Or(cfg.KeyPrefix, "paddock:")}, nil
}

// Fleet is the fleet as one tenant may see it (FleetView.Read).
type Fleet struct {
	Tenant   string                `json:"tenant"`
	Workers  []FleetWorker         `json:"workers"`
	Capacity FleetCapacity         `json:"capacity"`
	Queues   []FleetQueue          `json:"queues"`
	Reasons  []results.ReasonCount `json:"reasons"`
	// Partial says the tenant's counts stopped at the scan's bound
	// (fleetScan): they are lower bounds.
	Partial bool `json:"partial,omitempty"`
}

// FleetWorker is one worker that beat within the last hour, anonymous.
type FleetWorker struct {
	Alive          bool  `json:"alive"`
	HeartbeatAgeMS int64 `json:"heartbeat_age_ms"`
}

// FleetCapacity is the fleet's size: workers alive and their job slots.
type FleetCapacity struct {
	WorkersAlive int `json:"workers_alive"`
	Slots        int `json:"slots"`
}

// FleetQueue is the tenant's own jobs in one queue.
type FleetQueue struct {
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

// Read returns the fleet as tenant may see it.
func (v *FleetView) Read(ctx context.Context, tenant string) (Fleet, error) {
	body := Fleet{Tenant: tenant, Workers: []FleetWorker{}, Queues: []FleetQueue{}, Reasons: []results.ReasonCount{}}
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
	queues := map[string]*FleetQueue{}
	q := func(name string) *FleetQueue {
		if queues[name] == nil {
			queues[name] = &FleetQueue{Name: name}
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
func (v *FleetView) ended(ctx context.Context, body *Fleet, q func(string) *FleetQueue) error {
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
func (v *FleetView) workers(ctx context.Context) ([]FleetWorker, error) {
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
	out := make([]FleetWorker, 0, len(zs))
	for i, z := range zs {
		out = append(out, FleetWorker{Alive: alive[i].Val() == 1, HeartbeatAgeMS: max(0, now.UnixMilli()-int64(z.Score))})
	}
	// Youngest beat first: the order says nothing of which worker is which.
	slices.SortFunc(out, func(a, b FleetWorker) int { return cmp.Compare(a.HeartbeatAgeMS, b.HeartbeatAgeMS) })
	return out, nil
}
