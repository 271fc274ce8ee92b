package fleettest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

// report is bench/out/fleet.json.
type report struct {
	Run      string `json:"run"`
	Short    bool   `json:"short"`
	Replicas int    `json:"replicas"`
	Sentinel bool   `json:"sentinel_url"`
	Auth     string `json:"auth"`
	Jobs     int    `json:"jobs"`
	Accepted int    `json:"accepted"`
	// Lost: accepted jobs without a result in Redis or in their tenant's
	// results stream. Doubled: jobs a worker started more often than
	// their result says (Redis's run counter above the result's runs), or
	// whose stream result disagrees with Redis. Retried: results that
	// record a re-run after an infrastructure fault (runs > 1).
	Lost          int            `json:"lost"`
	Doubled       int            `json:"doubled"`
	Retried       int            `json:"retried"`
	States        map[string]int `json:"states"`
	LeftoverBoxes int            `json:"leftover_boxes"`
	// FencedJobs: jobs a partitioned worker was running, each checked to
	// end elsewhere (runs ≥ 2), not with the fenced run's result.
	FencedJobs int           `json:"fenced_jobs"`
	QueueLeft  int           `json:"queue_left"`
	JobsLeft   uint64        `json:"jobs_streams_left"`
	DurationS  float64       `json:"duration_s"`
	JobsPerS   float64       `json:"jobs_per_s"`
	Baseline   faultRecord   `json:"baseline"`
	Faults     []faultRecord `json:"faults"`
	// SupervisorRestarts: exits of a paddock process the harness did not
	// cause, each restarted a second later as systemd or compose would.
	SupervisorRestarts map[string]int `json:"supervisor_restarts,omitempty"`
	// SupervisorExits: each restarted process's last log line before it.
	SupervisorExits map[string][]string `json:"supervisor_exits,omitempty"`
	Problems        []string            `json:"problems,omitempty"`
}

// problem notes a failed check (the first 50 in detail).
func (r *report) problem(format string, args ...any) {
	if len(r.Problems) < 50 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// waitQueueEmpty waits until no queue holds an active, pending, retry or
// scheduled task (asynq's recoverer completes stale originals within
// ~2 min) and returns what is left when ctx ends.
func (f *fleet) waitQueueEmpty(ctx context.Context) int {
	left := -1
	_ = poll(ctx, "empty queues", func() bool {
		qs, err := f.insp.Queues()
		if err != nil {
			return false
		}
		left = 0
		for _, q := range qs {
			if info, err := f.insp.GetQueueInfo(q); err == nil {
				left += info.Active + info.Pending + info.Retry + info.Scheduled
			}
		}
		return left == 0
	})
	return left
}

// check reads every accepted job's result from Redis and from its
// tenant's results stream, and its run counter, and fills rep.
func (f *fleet) check(ctx context.Context, keys []string, rep *report) ([]job.Result, error) {
	streams := map[string]jetstream.Stream{}
	perTenant := map[string]uint64{}
	var out []job.Result
	rep.States = map[string]int{}
	for _, key := range keys {
		t, id, _ := job.SplitKey(key)
		r, err := f.store.Get(ctx, key)
		if err != nil {
			rep.Lost++
			rep.problem("%s: no result in Redis: %v", key, err)
			continue
		}
		out = append(out, r)
		rep.States[string(r.State)+"/"+string(r.Reason)]++
		if r.Runs > 1 {
			rep.Retried++
		}
		runs, err := f.rdb.Get(ctx, "paddock:runs:"+key).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if runs > max(r.Runs, 1) {
			rep.Doubled++
			rep.problem("%s: started %d times, its result says runs=%d", key, runs, r.Runs)
		}
		if streams[t] == nil {
			if streams[t], err = f.js.Stream(ctx, job.ResultsStream(t)); err != nil {
				return nil, err
			}
		}
		perTenant[t]++
		f.checkStream(ctx, streams[t], t, id, r, rep)
	}
	for t, n := range perTenant {
		info, err := streams[t].Info(ctx)
		if err == nil && info.State.Msgs != n {
			rep.problem("%s holds %d results for %d accepted jobs", job.ResultsStream(t), info.State.Msgs, n)
		}
	}
	f.checkFenced(ctx, rep)
	return out, f.checkTenants(ctx, rep)
}

// checkFenced checks that no job a partitioned worker was running has the
// result of that run: its self-fence stopped it, and another worker ran
// it again (runs ≥ 2).
func (f *fleet) checkFenced(ctx context.Context, rep *report) {
	for _, fr := range f.fenced {
		for _, id := range fr.jobs {
			r, err := f.store.Get(ctx, job.Key(tenantOf(id), id))
			if err != nil {
				continue // counted as lost above
			}
			rep.FencedJobs++
			if r.Worker == fr.worker && r.StartedAt.Before(fr.at) {
				rep.problem("%s: recorded by %s's run from before its partition (no self-fence)", id, fr.worker)
			} else if r.Runs < 2 {
				rep.problem("%s: fenced on %s but its result says runs=%d", id, fr.worker, r.Runs)
			}
		}
	}
}

// checkStream compares the stream's result of id with Redis's.
func (f *fleet) checkStream(ctx context.Context, s jetstream.Stream, t, id string, r job.Result, rep *report) {
	m, err := s.GetLastMsgForSubject(ctx, job.ResultSubject(t, id))
	if err != nil {
		rep.Lost++
		rep.problem("%s/%s: result in Redis but not in %s: %v", t, id, job.ResultsStream(t), err)
		return
	}
	var sr job.Result
	if err := json.Unmarshal(m.Data, &sr); err != nil || sr.ID != id || sr.State != r.State || sr.Runs != r.Runs {
		rep.Doubled++
		rep.problem("%s/%s: the stream's result (%s runs=%d) is not Redis's (%s runs=%d)", t, id, sr.State, sr.Runs, r.State, r.Runs)
	}
}

// checkTenants checks every tenant's record and that its jobs stream is
// empty (a work queue: a submission goes once its job has a result).
func (f *fleet) checkTenants(ctx context.Context, rep *report) error {
	reg, err := tenant.NewRegistry(ctx, f.js)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		if _, err := reg.Get(ctx, t); err != nil {
			rep.problem("tenant %s: record gone: %v", t, err)
		}
		s, err := f.js.Stream(ctx, job.JobsStream(t))
		if err != nil {
			rep.problem("tenant %s: jobs stream: %v", t, err)
			continue
		}
		rep.JobsLeft += s.CachedInfo().State.Msgs
	}
	return nil
}

// measure fills each fault's costs from the results' finish times:
// window i runs from fault i's inject to 30 s after results flowed again
// (at most to fault i+1's inject; the last to the last completion). The
// baseline is the window before the first fault.
func measure(rs []job.Result, recs []faultRecord, warm time.Time) faultRecord {
	ends := make([]time.Time, 0, len(rs))
	for _, r := range rs {
		ends = append(ends, r.FinishedAt)
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	if len(ends) == 0 {
		return faultRecord{}
	}
	last := ends[len(ends)-1]
	base := faultRecord{Name: "baseline", InjectedAt: warm}
	if len(recs) > 0 {
		base.HealedAt = recs[0].InjectedAt
	}
	window(&base, rs, ends, orTime(base.HealedAt, last))
	for i := range recs {
		end := last
		if i+1 < len(recs) {
			end = recs[i+1].InjectedAt
		}
		if e := recs[i].RecoveredAt.Add(30 * time.Second); !recs[i].RecoveredAt.IsZero() && e.Before(end) {
			end = e
		}
		window(&recs[i], rs, ends, end)
	}
	return base
}

func orTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// window measures rec from its InjectedAt to end.
func window(rec *faultRecord, rs []job.Result, ends []time.Time, end time.Time) {
	t0 := rec.InjectedAt
	prev, gap, gapEnd := t0, 0.0, t0
	for _, e := range ends {
		if e.Before(t0) || e.After(end) {
			continue
		}
		if d := e.Sub(prev).Seconds(); d > gap {
			gap, gapEnd = d, e
		}
		prev = e
	}
	rec.GapS, rec.RecoveryS = round(gap), round(gapEnd.Sub(t0).Seconds())
	for _, r := range rs {
		if r.SubmittedAt.Before(t0) && r.FinishedAt.After(t0) {
			rec.InFlight++
			rec.MaxDelayS = max(rec.MaxDelayS, round(r.FinishedAt.Sub(t0).Seconds()))
		}
		if r.Runs > 1 && !r.FinishedAt.Before(t0) && !r.FinishedAt.After(end) {
			rec.RerunsSeen++
		}
	}
}

func round(s float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(s, 'f', 1, 64), 64)
	return v
}

// write writes rep to bench/out/<name> at the repository's root.
func (rep *report) write(name string) (string, error) {
	dir := filepath.Join("..", "..", "bench", "out")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}
