package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// Jobs that wait for a fair-share slot are in the job list too. The index
// learns of a job when the scheduler enqueues it (Indexer.Queued), but a
// tenant's backlog waits before that: in the tenant's submissions stream,
// beyond its consumer's MaxAckPending (its max-running), or delivered and
// held for one of Config.Slots. The stream is a work queue, so it holds
// exactly the tenant's jobs that have no result yet. The Lister reads it,
// newest first, and shows each job the index does not hold as queued
// (QueuedAt and UpdatedAt are its submission's time, by the NATS server's
// clock); nothing is written per job, so a backlog costs the list
// requests, not the submissions.
//
// A page starts with the waiting jobs, then goes on with the index. While
// it shows waiting jobs, a page's NextCursor is "w.<sequence>" (continue
// below that stream sequence); an index cursor is base64, which has no '.'.
// A job enqueued between two pages can come again, as it can in Changes.

// IndexProbe is the part of *results.Store that tells which jobs the index
// holds. A ListStore without it lists the index only.
type IndexProbe interface {
	Indexed(ctx context.Context, keys []string) (map[string]bool, error)
}

const (
	// waitingScan bounds the stream sequences one request reads; a page cut
	// short by it has a NextCursor.
	waitingScan = 512
	// waitingBatch is how many submissions are probed in the index at once.
	waitingBatch = 64
	// waitingCursor prefixes a NextCursor inside the waiting jobs.
	waitingCursor = "w."
)

// waitingScanOf is a walk down one tenant's submissions stream.
type waitingScanOf struct {
	tenant string
	below  uint64    // read sequences below this one; 0: from the top
	limit  int       // at most this many jobs
	since  time.Time // stop at a submission older than this (Changes)
	keep   func(*job.Summary) bool
}

// waitingJob is a waiting job's summary and its stream sequence.
type waitingJob struct {
	job.Summary
	seq uint64
}

// waiting walks w.tenant's submissions stream newest first and returns the
// jobs the index does not hold that w.keep accepts, at most w.limit. next
// is the sequence to continue below when the walk stopped early (the limit
// reached, or waitingScan sequences read); 0 when it reached the stream's
// first message or one older than w.since.
func (l *Lister) waiting(ctx context.Context, w waitingScanOf) (jobs []waitingJob, next uint64, err error) {
	st, err := l.js.Stream(ctx, job.JobsStream(w.tenant))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, nil // a tenant that never submitted
	}
	if err != nil {
		return nil, 0, fmt.Errorf("scheduler: list waiting jobs: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("scheduler: list waiting jobs: %w", err)
	}
	first, seq := info.State.FirstSeq, info.State.LastSeq
	if w.below > 0 {
		seq = min(seq, w.below-1)
	}
	for budget := waitingScan; seq >= first && seq > 0; {
		if budget <= 0 {
			return jobs, seq + 1, nil
		}
		batch, low, older, err := l.readBatch(ctx, st, w, seq, max(first, 1), &budget)
		if err != nil {
			return nil, 0, err
		}
		found, err := l.notIndexed(ctx, batch, w.keep)
		if err != nil {
			return nil, 0, err
		}
		for _, j := range found {
			jobs = append(jobs, j)
			if len(jobs) == w.limit {
				return jobs, j.seq, nil
			}
		}
		if older {
			return jobs, 0, nil
		}
		seq = low - 1
	}
	return jobs, 0, nil
}

// readBatch reads up to waitingBatch submissions down from seq (not below
// first), newest first, counting each sequence against budget. low is the
// last sequence read; older reports a submission older than w.since, where
// the walk ends. A sequence whose job has a result is gone (work queue); a
// submission that does not decode is the scheduler's to reject.
func (l *Lister) readBatch(ctx context.Context, st jetstream.Stream, w waitingScanOf, seq, first uint64, budget *int) (batch []waitingJob, low uint64, older bool, err error) {
	low = seq
	for ; seq >= first && len(batch) < waitingBatch && *budget > 0; seq-- {
		low = seq
		*budget--
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, false, fmt.Errorf("scheduler: list waiting jobs: read %s #%d: %w", job.JobsStream(w.tenant), seq, err)
		}
		if m.Time.Before(w.since) {
			return batch, low, true, nil
		}
		spec, err := job.Decode(m.Data)
		if err != nil || job.CheckID(spec.ID) != nil {
			continue
		}
		batch = append(batch, waitingJob{Summary: waitingSummary(w.tenant, spec, m.Time), seq: seq})
		if seq == first {
			break
		}
	}
	return batch, low, false, nil
}

// notIndexed returns the jobs of batch that the index does not hold and
// keep accepts, in batch's order.
func (l *Lister) notIndexed(ctx context.Context, batch []waitingJob, keep func(*job.Summary) bool) ([]waitingJob, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	keys := make([]string, len(batch))
	for i := range batch {
		keys[i] = batch[i].Key()
	}
	in, err := l.probe.Indexed(ctx, keys)
	if err != nil {
		return nil, err
	}
	var out []waitingJob
	for _, j := range batch {
		if !in[j.Key()] && keep(&j.Summary) {
			out = append(out, j)
		}
	}
	return out, nil
}

// waitingSummary is the summary of a job not scheduled yet.
func waitingSummary(tenant string, spec job.Spec, at time.Time) job.Summary {
	return job.Summary{
		ID: spec.ID, Tenant: tenant, State: job.StateQueued,
		Queue: cmp.Or(spec.Queue, job.DefaultQueue), Labels: spec.Labels,
		Command: job.ShortCommand(spec.Command), Image: spec.Image,
		QueuedAt: at.UTC(), UpdatedAt: at.UTC(),
	}
}

// matches reports whether a waiting job's summary s passes q's filters.
func matches(q job.ListQuery, s *job.Summary) bool {
	if (q.State != "" && q.State != job.StateQueued) || q.Reason != "" {
		return false
	}
	if q.Queue != "" && q.Queue != s.Queue {
		return false
	}
	if q.IDPrefix != "" && !strings.HasPrefix(s.ID, q.IDPrefix) {
		return false
	}
	if q.Label != "" {
		k, v, hasVal := strings.Cut(q.Label, "=")
		got, ok := s.Labels[k]
		if !ok || (hasVal && got != v) {
			return false
		}
	}
	return true
}

// listPage answers a list query: the waiting jobs first, then the index.
func (l *Lister) listPage(ctx context.Context, q job.ListQuery) (job.ListPage, error) {
	if err := q.Check(); err != nil {
		return job.ListPage{}, err
	}
	below, inWaiting, err := parseWaitingCursor(q.Cursor)
	if err != nil {
		return job.ListPage{}, err
	}
	if !inWaiting || l.probe == nil || q.Tenant == "" || (q.State != "" && q.State != job.StateQueued) || q.Reason != "" {
		if inWaiting || q.Cursor == waitingCursor+"0" {
			q.Cursor = "" // the index from its top
		}
		return l.store.List(ctx, q)
	}
	waiting, next, err := l.waiting(ctx, waitingScanOf{tenant: q.Tenant, below: below, limit: q.Limit,
		keep: func(s *job.Summary) bool { return matches(q, s) }})
	if err != nil {
		return job.ListPage{}, err
	}
	page := job.ListPage{Jobs: make([]job.Summary, 0, len(waiting))}
	seen := make(map[string]bool, len(waiting))
	for _, w := range waiting {
		page.Jobs = append(page.Jobs, w.Summary)
		seen[w.ID] = true
	}
	if next > 0 {
		page.NextCursor = waitingCursor + strconv.FormatUint(next, 10)
		return page, nil
	}
	if len(page.Jobs) == q.Limit {
		// Full of waiting jobs, and the stream's end reached: the index's
		// first page comes next (it may be empty).
		page.NextCursor = waitingCursor + "0"
		return page, nil
	}
	iq := q
	iq.Cursor = ""
	iq.Limit = q.Limit - len(page.Jobs)
	ip, err := l.store.List(ctx, iq)
	if err != nil {
		return job.ListPage{}, err
	}
	for _, s := range ip.Jobs {
		if !seen[s.ID] {
			page.Jobs = append(page.Jobs, s)
		}
	}
	page.NextCursor = ip.NextCursor
	return page, nil
}

// parseWaitingCursor reads a list cursor: "" starts with the waiting jobs
// (below 0: from the top); "w.<n>" continues them below sequence n, where
// "w.0" means they are done and the index's first page comes next; any
// other cursor is the index's.
func parseWaitingCursor(c string) (below uint64, inWaiting bool, err error) {
	if c == "" {
		return 0, true, nil
	}
	rest, ok := strings.CutPrefix(c, waitingCursor)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%w %q: pass a next_cursor from a previous page unchanged, or none for the first page", results.ErrBadCursor, job.Truncate(c, 40))
	}
	if n == 0 {
		return 0, false, nil
	}
	return n, true, nil
}

// changedWaiting merges into indexed, the index's changes of tenant since
// a time (oldest first, at most limit plus the last one's instant), the
// waiting jobs submitted since then, and trims the merge the same way. The
// waiting jobs are read forward from the first submission at or after
// since; when waitingScan sequences did not reach the stream's end, the
// merge stops at the last submission read, so that a follower resuming
// from the last UpdatedAt misses none.
func (l *Lister) changedWaiting(ctx context.Context, tenant string, since time.Time, limit int, indexed []job.Summary) ([]job.Summary, error) {
	if l.probe == nil || tenant == "" {
		return indexed, nil
	}
	limit = cmp.Or(limit, job.DefaultListLimit)
	waiting, cutoff, err := l.waitingSince(ctx, tenant, since, limit)
	if err != nil || len(waiting) == 0 && cutoff.IsZero() {
		return indexed, err
	}
	all := append([]job.Summary(nil), indexed...)
	all = append(all, waiting...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].UpdatedAt.Before(all[j].UpdatedAt) })
	if !cutoff.IsZero() {
		n := sort.Search(len(all), func(i int) bool { return all[i].UpdatedAt.After(cutoff) })
		all = all[:n]
	}
	if len(all) > limit {
		last, n := all[limit-1].UpdatedAt, limit
		for n < len(all) && all[n].UpdatedAt.Equal(last) {
			n++
		}
		all = all[:n]
	}
	return all, nil
}

// waitingSince returns, oldest first, up to limit waiting jobs of tenant
// submitted at or after since. cutoff is zero when the walk reached the
// stream's end or the limit; else it is the time of the last submission
// read within waitingScan sequences.
func (l *Lister) waitingSince(ctx context.Context, tenant string, since time.Time, limit int) (jobs []job.Summary, cutoff time.Time, err error) {
	st, err := l.js.Stream(ctx, job.JobsStream(tenant))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("scheduler: list waiting jobs: %w", err)
	}
	next := nextFor(job.SubmitSubject(tenant))
	seq, err := firstSince(ctx, st, next, since)
	if err != nil {
		return nil, time.Time{}, err
	}
	var batch []waitingJob
	for read := 0; ; read++ {
		m, err := st.GetMsg(ctx, seq, next)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break // the stream's end
		}
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("scheduler: list waiting jobs: %w", err)
		}
		if spec, err := job.Decode(m.Data); err == nil && job.CheckID(spec.ID) == nil {
			batch = append(batch, waitingJob{Summary: waitingSummary(tenant, spec, m.Time), seq: m.Sequence})
		}
		seq = m.Sequence + 1
		if len(batch) == waitingBatch || read+1 == waitingScan {
			found, err := l.notIndexed(ctx, batch, func(*job.Summary) bool { return true })
			if err != nil {
				return nil, time.Time{}, err
			}
			batch = batch[:0]
			for _, j := range found {
				jobs = append(jobs, j.Summary)
			}
			if len(jobs) >= limit {
				return jobs[:limit], time.Time{}, nil
			}
			if read+1 == waitingScan {
				return jobs, m.Time.UTC(), nil
			}
		}
	}
	found, err := l.notIndexed(ctx, batch, func(*job.Summary) bool { return true })
	if err != nil {
		return nil, time.Time{}, err
	}
	for _, j := range found {
		jobs = append(jobs, j.Summary)
	}
	return jobs[:min(len(jobs), limit)], time.Time{}, nil
}

// nextFor makes GetMsg return the first message at or after a sequence on
// subject, skipping the sequences of jobs that have a result.
func nextFor(subject string) jetstream.GetMsgOpt { return jetstream.WithGetMsgSubject(subject) }

// firstSince finds, by bisection over the stream's sequences (a stream's
// times grow with its sequences), a sequence from which next reads the
// first submission at or after since.
func firstSince(ctx context.Context, st jetstream.Stream, next jetstream.GetMsgOpt, since time.Time) (uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("scheduler: list waiting jobs: %w", err)
	}
	lo, hi := max(info.State.FirstSeq, 1), info.State.LastSeq+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, err := st.GetMsg(ctx, mid, next)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			hi = mid
		case err != nil:
			return 0, fmt.Errorf("scheduler: list waiting jobs: %w", err)
		case m.Time.Before(since):
			lo = m.Sequence + 1
		default:
			hi = mid
		}
	}
	return lo, nil
}
