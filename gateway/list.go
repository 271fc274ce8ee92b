package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// The dashboard's data (issue 16): the job list, its live changes, a job's
// trace and the fleet at a glance. Each is the caller's tenant's only: the
// list comes from the schedulers' list service through the tenant's own
// client (whose NATS grant names only its own list subject), and a trace
// is shown only for a job the tenant's list has.
//
//	GET /v1/jobs?state=&reason=&queue=&label=&q=&cursor=&limit=   one page, newest first
//	GET /v1/events                                                SSE: one `job` event per changed job
//	GET /v1/jobs/{id}/trace                                       the job's spans (Config.Spans)
//	GET /v1/fleet                                                 workers, queues, reasons (Config.Fleet)

const (
	// eventsPoll spaces the change polls of one GET /v1/events.
	eventsPoll = 500 * time.Millisecond
	// eventsLookBack is how far before the gateway's now a stream without
	// Last-Event-ID starts: changes written just before the stream opened
	// (between the client's list and its events) are sent, whatever the
	// skew between this clock and the index's.
	eventsLookBack = 5 * time.Second
)

// Span is one span of a job's trace, as GET /v1/jobs/{id}/trace returns it.
type Span struct {
	TraceID  string         `json:"trace_id"`
	SpanID   string         `json:"span_id"`
	ParentID string         `json:"parent_id,omitempty"`
	Name     string         `json:"name"`
	Start    time.Time      `json:"start"`
	End      time.Time      `json:"end"`
	Status   string         `json:"status"` // unset, ok or error
	Attrs    map[string]any `json:"attrs,omitempty"`
}

// traceBody is the answer of GET /v1/jobs/{id}/trace.
type traceBody struct {
	Spans []Span `json:"spans"`
}

// listQuery reads GET /v1/jobs's query.
func listQuery(r *http.Request) (job.ListQuery, error) {
	v := r.URL.Query()
	q := job.ListQuery{State: job.State(v.Get("state")), Reason: job.Reason(v.Get("reason")), Queue: v.Get("queue"),
		Label: v.Get("label"), IDPrefix: v.Get("q"), Cursor: v.Get("cursor")}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > job.MaxListLimit {
			return q, invalidFields("the query is invalid", []job.FieldError{{Field: "limit",
				Message: fmt.Sprintf("%q: want a whole number from 1 to %d", job.Truncate(l, 20), job.MaxListLimit)}})
		}
		q.Limit = n
	}
	if err := q.Check(); err != nil {
		return q, invalidFields("the query is invalid", job.FieldErrors(err))
	}
	return q, nil
}

// listErr explains a failed list request.
func listErr(err error) error {
	switch {
	case errors.Is(err, client.ErrNoLister):
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second, Err: err,
			Message: "no scheduler answers job list requests right now (none runs, or it is older than the job list); retry shortly"}
	case errors.Is(err, job.ErrInvalid):
		return invalidFields("the query is invalid", job.FieldErrors(err))
	}
	return err
}

// listJobs is GET /v1/jobs.
func (g *Gateway) listJobs(w http.ResponseWriter, r *http.Request, id Identity) error {
	q, err := listQuery(r)
	if err != nil {
		return err
	}
	c, err := g.tenantClient(r.Context(), id)
	if err != nil {
		return err
	}
	page, err := c.List(r.Context(), q)
	if err != nil {
		return listErr(err)
	}
	return writeJSON(w, http.StatusOK, page)
}

// ownJob reports whether the tenant of c has job id in its list (queued,
// running or ended within the retention).
func ownJob(ctx context.Context, c *client.Client, id string) (bool, error) {
	q := job.ListQuery{IDPrefix: id, Limit: job.MaxListLimit}
	for range 5 { // ids sharing the prefix: a few pages at most
		page, err := c.List(ctx, q)
		if err != nil {
			return false, listErr(err)
		}
		for _, s := range page.Jobs {
			if s.ID == id {
				return true, nil
			}
		}
		if page.NextCursor == "" {
			return false, nil
		}
		q.Cursor = page.NextCursor
	}
	return false, nil
}

// jobTrace is GET /v1/jobs/{id}/trace.
func (g *Gateway) jobTrace(w http.ResponseWriter, r *http.Request, id Identity) error {
	if g.cfg.Spans == nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable,
			Message: "this gateway reads no spans (it was started without a span file); `paddock up` writes <data-dir>/spans.jsonl"}
	}
	jid, c, err := g.jobClient(r, id)
	if err != nil {
		return err
	}
	ok, err := ownJob(r.Context(), c, jid)
	if err != nil {
		return err
	}
	if !ok {
		return &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: fmt.Sprintf(
			"tenant %s has no job %s in its list (the list keeps the jobs of the result retention)", id.Tenant, jid)}
	}
	spans, err := g.cfg.Spans(r.Context(), jid)
	if err != nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second, Err: err,
			Message: "the spans could not be read: " + err.Error()}
	}
	return writeJSON(w, http.StatusOK, traceBody{Spans: tenantSpans(spans, id.Tenant)})
}

// tenantSpans keeps the spans of the traces that are tenant's (a span of the
// trace names tenant in job.AttrTenant): job ids are unique per tenant
// only, so another tenant's trace of the same id is left out. Sorted by
// start.
func tenantSpans(spans []Span, tenant string) []Span {
	mine := map[string]bool{}
	for _, s := range spans {
		if t, _ := s.Attrs[job.AttrTenant].(string); t == tenant {
			mine[s.TraceID] = true
		}
	}
	out := []Span{}
	for _, s := range spans {
		if mine[s.TraceID] {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// jobEvents is GET /v1/events: the tenant's job changes as server-sent
// events, `event: job` with a job.Summary, `id:` its UpdatedAt in Unix
// microseconds (a reconnect's Last-Event-ID resumes there), polled every
// eventsPoll; `: ping` every sseHeartbeat while idle. A failure that
// retrying cannot mend (the tenant's NATS grant refuses the list) is an
// `event: error`, and the stream ends; others are retried at the next poll.
func (g *Gateway) jobEvents(w http.ResponseWriter, r *http.Request, id Identity) error {
	release, ok := g.lim.openStream(limitKey(id), time.Now())
	if !ok {
		return &apiError{Status: http.StatusTooManyRequests, Code: codeTooManyStreams, RetryAfter: sseHeartbeat,
			Message: fmt.Sprintf("token %s holds %d event streams already, its limit: close one first", id.TokenID, g.cfg.MaxStreams)}
	}
	defer release()
	c, err := g.tenantClient(r.Context(), id)
	if err != nil {
		return err
	}
	since := time.Now().Add(-eventsLookBack)
	if us, err := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && us > 0 {
		since = time.UnixMicro(us)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), heartbeat: sseHeartbeat, writeTimeout: sseWriteTimeout}
	if err := sw.comment("jobs of " + id.Tenant); err != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	events := make(chan sseEvent, sseBuffer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.pollChanges(ctx, c, since, events)
	}()
	defer func() {
		cancel()
		<-done
	}()
	if err := sw.run(ctx, events); err != nil {
		g.log.Debug("job event stream dropped", "tenant", id.Tenant, "err", err)
	}
	return nil
}

// pollChanges sends a job event per change of c's tenant's jobs from
// since on, until ctx ends. A summary already sent with the same
// UpdatedAt is not sent again (Changes repeats the last instant).
func (g *Gateway) pollChanges(ctx context.Context, c *client.Client, since time.Time, out chan<- sseEvent) {
	defer close(out)
	sent := map[string]time.Time{}
	tick := time.NewTicker(eventsPoll)
	defer tick.Stop()
	for {
		from := since
		jobs, err := c.Changes(ctx, since, job.MaxListLimit)
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, client.ErrPermission):
			// Retrying cannot help: say so, and end the stream.
			select {
			case out <- errorEvent(err):
			case <-ctx.Done():
			}
			return
		default:
			g.log.Debug("job changes not read; retrying", "err", err)
		}
		for _, s := range jobs {
			if at, ok := sent[s.Key()]; ok && at.Equal(s.UpdatedAt) {
				continue
			}
			sent[s.Key()] = s.UpdatedAt
			ev := sseEvent{name: "job", id: strconv.FormatInt(s.UpdatedAt.UnixMicro(), 10), data: s}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
			if s.UpdatedAt.After(since) {
				since = s.UpdatedAt
			}
		}
		for k, at := range sent {
			if at.Before(since) {
				delete(sent, k)
			}
		}
		if len(jobs) >= job.MaxListLimit && since.After(from) {
			continue // more are waiting
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}
