package results

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/paddockhq/paddock/job"
)

// The job index: a summary of every job of the retention (job.Summary),
// written by the paths that already see each job go by, so that the list
// of jobs needs no scan of results or queues:
//
//   - Queued, by the scheduler once asynq accepted the task;
//   - BeginRun (running, and the run count), by the worker;
//   - Record (the terminal state, reason, exit code, finish time).
//
// Layout (P is StoreConfig.KeyPrefix; every key carries the hash tag
// {idx}, so the scripts' keys share one Redis Cluster slot):
//
//	P idx{idx}:job:<tenant>/<id>   hash: the summary's fields (summaryFields)
//	P idx{idx}:t:<tenant>:q        zset tenant/id, score = queued time (ms)
//	P idx{idx}:all:q               the same for every tenant
//	P idx{idx}:t:<tenant>:u        zset tenant/id, score = last update (µs, Redis clock)
//	P idx{idx}:all:u               the same for every tenant
//	P idx{idx}:reasons:<n>         hash reason → count of jobs ended in 5-minute bucket n
//	P trim{idx}:<tenant>           trim marker: set (1 s) when the tenant's sets were last trimmed
//
// Each write is one script (index.lua) of about ten commands: it gives the
// job's hash the retention, and a final write, at most once a second per
// tenant, trims the sorted sets of what is older than the retention and
// gives them the retention and a second, so the index holds what the
// results hold (a set a queued write created has its TTL once the job
// ended). A
// terminal entry never changes again, and a late "queued" never takes a
// running job back. The index is a view:
// failing to write it is logged, never an error of the write path.

// Bounds of the index's reads.
const (
	// ListScanBudget bounds the index entries one List call looks at; a
	// page cut short by it has a NextCursor.
	ListScanBudget = 5000
	// reasonBucket is the width of a reason-count bucket.
	reasonBucket = 5 * time.Minute
)

// ErrBadCursor is wrapped when a ListQuery's Cursor is not one List gave.
var ErrBadCursor = errors.New("results: invalid list cursor")

var (
	//go:embed index.lua
	indexSource string
	//go:embed list.lua
	listSource string
	//go:embed changes.lua
	changesSource string

	indexScript   = redis.NewScript(indexSource)
	listScript    = redis.NewScript(listSource)
	changesScript = redis.NewScript(changesSource)
)

// summaryFields are the index hash's fields, in the order the read scripts
// return them (id first: a missing hash is an entry to skip).
var summaryFields = []any{"id", "tenant", "state", "reason", "queue", "image", "cmd", "labels", "q", "st", "fin", "runs", "exit", "up"}

func (s *Store) idxKey(rest string) string { return s.cfg.KeyPrefix + "idx{idx}:" + rest }
func (s *Store) idxJobPrefix() string      { return s.idxKey("job:") }
func (s *Store) idxQueued(tenant string) string {
	if tenant == "" {
		return s.idxKey("all:q")
	}
	return s.idxKey("t:" + tenant + ":q")
}
func (s *Store) idxUpdated(tenant string) string {
	if tenant == "" {
		return s.idxKey("all:u")
	}
	return s.idxKey("t:" + tenant + ":u")
}
func (s *Store) idxReasons(bucket int64) string {
	return s.idxKey("reasons:" + strconv.FormatInt(bucket, 10))
}

// indexWrite is one call of index.lua.
type indexWrite struct {
	mode   string // queued, running, final
	key    string // tenant/id
	queued time.Time
	state  []string // field, value pairs applied unless the job is past them
	static []string // field, value pairs always applied ("" values skipped)
}

func (s *Store) indexArgs(w indexWrite) (keys []string, args []any) {
	tenant, _, _ := job.SplitKey(w.key)
	q := w.queued
	if q.IsZero() {
		q = time.Now()
	}
	keys = []string{s.idxJobPrefix() + w.key, s.idxQueued(tenant), s.idxQueued(""), s.idxUpdated(tenant), s.idxUpdated(""),
		s.idxReasons(time.Now().UnixMilli() / reasonBucket.Milliseconds()), s.cfg.KeyPrefix + "trim{idx}:" + tenant}
	args = []any{w.mode, w.key, s.cfg.Retention.Milliseconds(), q.UnixMilli(), len(w.state) / 2}
	for _, v := range w.state {
		args = append(args, v)
	}
	for _, v := range w.static {
		args = append(args, v)
	}
	return keys, args
}

// index runs one index write; a failure is logged (the index is a view).
func (s *Store) index(ctx context.Context, w indexWrite) {
	keys, args := s.indexArgs(w)
	if err := indexScript.Run(ctx, s.rdb, keys, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		s.indexFailed(w, err)
	}
}

// indexWarn rate-limits the index's failure logs (one every 5 s, the next
// one counting those left out).
var (
	indexWarn       = rate.NewLimiter(rate.Every(5*time.Second), 1)
	indexSuppressed atomic.Int64
)

func (s *Store) indexFailed(w indexWrite, err error) {
	if !indexWarn.Allow() {
		indexSuppressed.Add(1)
		return
	}
	s.log.Warn("job index not updated; the job list may show the job late or stale", "job", w.key, "mode", w.mode,
		"err", err, "suppressed", indexSuppressed.Swap(0))
}

// Queued indexes spec's job as queued (runnable from queuedAt). The
// scheduler calls it once the task is in the queue. It never fails the
// caller: an index failure is logged and nil returned.
func (s *Store) Queued(ctx context.Context, spec job.Spec, queuedAt time.Time) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	labels := ""
	if len(spec.Labels) > 0 {
		b, _ := json.Marshal(spec.Labels)
		labels = string(b)
	}
	tenant := spec.Tenant
	tenant = cmp.Or(tenant, job.DefaultTenant)
	s.index(ctx, indexWrite{mode: "queued", key: spec.Key(), queued: queuedAt,
		state:  []string{"state", string(job.StateQueued)},
		static: []string{"id", spec.ID, "tenant", tenant, "queue", spec.Queue, "image", spec.Image, "labels", labels, "cmd", job.ShortCommand(spec.Command)}})
	return nil
}

// finalWrite is the index write of a stored result.
func finalWrite(r job.Result) indexWrite {
	state := []string{"state", string(r.State), "reason", string(r.Reason), "fin", ms(r.FinishedAt)}
	if r.ExitCode != nil {
		state = append(state, "exit", strconv.Itoa(*r.ExitCode))
	}
	if r.Runs > 0 {
		state = append(state, "runs", strconv.Itoa(r.Runs))
	}
	labels, cmd := "", ""
	if len(r.Labels) > 0 {
		b, _ := json.Marshal(r.Labels)
		labels = string(b)
	}
	if len(r.Attempts) > 0 {
		cmd = job.ShortCommand(r.Attempts[0].Command)
	}
	queued := r.QueuedAt
	if queued.IsZero() {
		queued = r.SubmittedAt
	}
	if queued.IsZero() {
		queued = r.FinishedAt
	}
	return indexWrite{mode: "final", key: r.Key(), queued: queued, state: state,
		static: []string{"id", r.ID, "tenant", r.Tenant, "queue", r.Queue, "image", r.Image, "labels", labels, "cmd", cmd, "st", ms(r.StartedAt)}}
}

func ms(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// List returns one page of q.Tenant's jobs (every tenant's when q.Tenant is
// ""), newest queued first, filtered as q says. It looks at most at
// ListScanBudget index entries: a page may then be short, with a
// NextCursor to go on from.
func (s *Store) List(ctx context.Context, q job.ListQuery) (job.ListPage, error) {
	if err := q.Check(); err != nil {
		return job.ListPage{}, err
	}
	if q.Tenant != "" {
		if err := job.CheckTenant(q.Tenant); err != nil {
			return job.ListPage{}, err
		}
	}
	maxScore, member, err := parseCursor(q.Cursor)
	if err != nil {
		return job.ListPage{}, err
	}
	lkey, lval, hasVal := strings.Cut(q.Label, "=")
	keyOnly := "0"
	if q.Label != "" && !hasVal {
		keyOnly = "1"
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	args := []any{s.idxJobPrefix(), maxScore, member, ListScanBudget, q.Limit, string(q.State), string(q.Reason), q.Queue, lkey, lval, keyOnly, q.IDPrefix}
	args = append(args, summaryFields...)
	res, err := listScript.Run(ctx, s.rdb, []string{s.idxQueued(q.Tenant)}, args...).Slice()
	if err != nil {
		return job.ListPage{}, fmt.Errorf("results: list jobs: %w", err)
	}
	if len(res) != 3 {
		return job.ListPage{}, fmt.Errorf("results: list jobs: unexpected script reply of %d values", len(res))
	}
	rows, _ := res[0].([]any)
	page := job.ListPage{Jobs: make([]job.Summary, 0, len(rows))}
	for _, row := range rows {
		if sum, ok := parseSummary(row); ok {
			page.Jobs = append(page.Jobs, sum)
		}
	}
	if ns, _ := res[1].(string); ns != "" {
		nm, _ := res[2].(string)
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(ns + " " + nm))
	}
	return page, nil
}

// parseCursor reads a NextCursor: the score and member of the last entry
// scanned ("+inf" and "" for the first page).
func parseCursor(c string) (score, member string, err error) {
	if c == "" {
		return "+inf", "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		var ok bool
		score, member, ok = strings.Cut(string(raw), " ")
		if n, perr := strconv.ParseInt(score, 10, 64); ok && perr == nil && n >= 0 {
			if _, _, kok := job.SplitKey(member); kok {
				return score, member, nil
			}
		}
	}
	return "", "", fmt.Errorf("%w %q: pass a next_cursor from a previous page unchanged, or none for the first page", ErrBadCursor, job.Truncate(c, 40))
}

// Changes returns tenant's summaries (every tenant's when tenant is "")
// updated at or after since, by the index's clock, oldest change first: at
// most limit (job.DefaultListLimit when 0, at most job.MaxListLimit), plus
// those changed in the same microsecond as the last. Resume with the last
// one's UpdatedAt: a summary may then come again, unchanged or not.
func (s *Store) Changes(ctx context.Context, tenant string, since time.Time, limit int) ([]job.Summary, error) {
	if tenant != "" {
		if err := job.CheckTenant(tenant); err != nil {
			return nil, err
		}
	}
	if limit <= 0 {
		limit = job.DefaultListLimit
	}
	limit = min(limit, job.MaxListLimit)
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	from := "-inf"
	if !since.IsZero() {
		from = strconv.FormatInt(since.UnixMicro(), 10)
	}
	args := append([]any{s.idxJobPrefix(), from, limit}, summaryFields...)
	rows, err := changesScript.Run(ctx, s.rdb, []string{s.idxUpdated(tenant)}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("results: changes of %s: %w", tenant, err)
	}
	out := make([]job.Summary, 0, len(rows))
	for _, row := range rows {
		if sum, ok := parseSummary(row); ok {
			out = append(out, sum)
		}
	}
	return out, nil
}

// parseSummary reads one row of summaryFields.
func parseSummary(row any) (job.Summary, bool) {
	v, _ := row.([]any)
	if len(v) != len(summaryFields) {
		return job.Summary{}, false
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	if str(0) == "" {
		return job.Summary{}, false
	}
	sum := job.Summary{ID: str(0), Tenant: str(1), State: job.State(str(2)), Reason: job.Reason(str(3)),
		Queue: str(4), Image: str(5), Command: str(6),
		QueuedAt: unixMilli(str(8)), StartedAt: unixMilli(str(9)), FinishedAt: unixMilli(str(10))}
	sum.State = cmp.Or(sum.State, job.StateQueued)
	if l := str(7); l != "" {
		_ = json.Unmarshal([]byte(l), &sum.Labels)
	}
	sum.Runs, _ = strconv.Atoi(str(11))
	if e, err := strconv.Atoi(str(12)); err == nil {
		sum.ExitCode = &e
	}
	if up, err := strconv.ParseInt(str(13), 10, 64); err == nil {
		sum.UpdatedAt = time.UnixMicro(up).UTC()
	}
	return sum, true
}

func unixMilli(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// ReasonCount is how many jobs of the fleet ended with each reason in the
// 5-minute window starting at Start.
type ReasonCount struct {
	Start  time.Time      `json:"start"`
	Counts map[string]int `json:"counts"`
}

// Reasons returns the fleet's reason counts per 5 minutes since since (at
// most the last 2 hours are kept), oldest window first; windows without
// an ended job are left out.
func (s *Store) Reasons(ctx context.Context, since time.Time) ([]ReasonCount, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	w := reasonBucket.Milliseconds()
	first, last := since.UnixMilli()/w, time.Now().UnixMilli()/w
	first = max(first, last-24)
	cmds := make(map[int64]*redis.MapStringStringCmd, last-first+1)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := first; b <= last; b++ {
			cmds[b] = p.HGetAll(ctx, s.idxReasons(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("results: reason counts: %w", err)
	}
	var out []ReasonCount
	for b, cmd := range cmds {
		if len(cmd.Val()) == 0 {
			continue
		}
		rc := ReasonCount{Start: time.UnixMilli(b * w).UTC(), Counts: map[string]int{}}
		for k, v := range cmd.Val() {
			rc.Counts[k], _ = strconv.Atoi(v)
		}
		out = append(out, rc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// runningWrite is the index write of a job's start; BeginRun sends it in
// its own transaction (one round trip).
func (s *Store) runningWrite(key string) indexWrite {
	return indexWrite{mode: "running", key: key, state: []string{"state", string(job.StateRunning)}}
}

// indexInPipe queues w on p as EVALSHA; settle then checks its outcome
// (loading the script and writing again when Redis did not know it).
func (s *Store) indexInPipe(ctx context.Context, p redis.Pipeliner, w indexWrite) *redis.Cmd {
	keys, args := s.indexArgs(w)
	return indexScript.EvalSha(ctx, p, keys, args...)
}

// settleIndex handles the reply of an index write sent by indexInPipe.
func (s *Store) settleIndex(ctx context.Context, cmd *redis.Cmd, w indexWrite) {
	err := cmd.Err()
	switch {
	case err == nil, errors.Is(err, redis.Nil):
	case redis.HasErrorPrefix(err, "NOSCRIPT"):
		s.index(ctx, w) // first write since Redis started: load the script
	default:
		s.indexFailed(w, err)
	}
}
