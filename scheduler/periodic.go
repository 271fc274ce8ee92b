package scheduler

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/robfig/cron/v3"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/job"
)

// ErrSchedule is wrapped by every error of a schedule file.
var ErrSchedule = errors.New("scheduler: invalid schedule")

// Periodic is one periodic job: Spec submitted at every tick of Cron, with
// the id "<Name>-<tick in Unix seconds>".
type Periodic struct {
	Name string
	Cron string
	Spec job.Spec
	when schedule
}

type schedule interface{ Next(time.Time) time.Time }

// ID is the job id of the tick at t: the same on every scheduler, so that
// the JetStream duplicate window, the scheduler's claim and the asynq task
// id let exactly one submission per tick run.
func (p Periodic) ID(tick time.Time) string {
	return p.Name + "-" + strconv.FormatInt(tick.Unix(), 10)
}

// scheduleLine is one line of a schedule file.
type scheduleLine struct {
	Name string          `json:"name"`
	Cron string          `json:"cron"`
	Spec json.RawMessage `json:"spec"`
}

// ParseSchedule reads a schedule file: JSON lines (blank lines and lines
// starting with # ignored) of
//
//	{"name": "nightly-build", "cron": "0 3 * * *", "spec": {"command": "make"}}
//
// name is 1-100 of [A-Za-z0-9._-] and unique; cron is a standard 5-field
// expression (minute hour day-of-month month day-of-week), a descriptor
// (@hourly, @daily, …) or "@every <duration>" (whole seconds, ticks aligned
// to multiples of the duration since the Unix epoch), evaluated in UTC
// unless prefixed with CRON_TZ=<zone>; spec is a job spec without an id (the
// scheduler validates it at each tick like any submission).
func ParseSchedule(r io.Reader) ([]Periodic, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), job.MaxSpecBytes+4096)
	var out []Periodic
	var errs []error
	names := map[string]int{}
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		p, err := parseScheduleLine([]byte(text))
		if err == nil && names[p.Name] > 0 {
			err = fmt.Errorf("name %q is already used on line %d", p.Name, names[p.Name])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			continue
		}
		names[p.Name] = n
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrSchedule, errors.Join(errs...))
	}
	return out, nil
}

func parseScheduleLine(b []byte) (Periodic, error) {
	var l scheduleLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Periodic{}, fmt.Errorf("want {\"name\": …, \"cron\": …, \"spec\": {…}}: %v", err)
	}
	if len(l.Name) > 100 || !job.ValidID(l.Name) {
		return Periodic{}, fmt.Errorf("name %q must be 1-100 of [A-Za-z0-9._-]", l.Name)
	}
	when, err := parseCron(l.Cron)
	if err != nil {
		return Periodic{}, fmt.Errorf("cron %q: %v", l.Cron, err)
	}
	if len(l.Spec) == 0 {
		return Periodic{}, errors.New("spec is missing")
	}
	spec, err := job.Decode(l.Spec)
	if err != nil {
		return Periodic{}, fmt.Errorf("spec: %w", err)
	}
	if spec.ID != "" {
		return Periodic{}, errors.New("spec: must not have an id (each tick's id is <name>-<tick Unix seconds>)")
	}
	if spec.Tenant != "" {
		if err := job.CheckTenant(spec.Tenant); err != nil {
			return Periodic{}, fmt.Errorf("spec: %w", err)
		}
	}
	return Periodic{Name: l.Name, Cron: l.Cron, Spec: spec, when: when}, nil
}

func parseCron(s string) (schedule, error) {
	if rest, ok := strings.CutPrefix(strings.TrimSpace(s), "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, err
		}
		if d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("@every %s: want whole seconds, at least 1s", d)
		}
		return alignedEvery(d), nil
	}
	sched, err := cron.ParseStandard(s)
	if err != nil {
		return nil, err
	}
	return utcSchedule{sched}, nil
}

// alignedEvery ticks at the multiples of d since the Unix epoch, so that
// every scheduler computes the same ticks (robfig's @every counts from
// whenever it was started).
type alignedEvery time.Duration

func (a alignedEvery) Next(t time.Time) time.Time {
	d := time.Duration(a)
	return t.Truncate(d).Add(d)
}

// utcSchedule evaluates a cron expression in UTC (unless it names its zone
// with CRON_TZ=), whatever the host's local zone.
type utcSchedule struct{ s cron.Schedule }

func (u utcSchedule) Next(t time.Time) time.Time { return u.s.Next(t.UTC()) }

// PeriodicConfig configures a Ticker. A zero field takes its default.
type PeriodicConfig struct {
	// Logger, default slog.Default(); logs with component=periodic.
	Logger *slog.Logger
	// Now, default time.Now.
	Now func() time.Time
	// PublishTimeout bounds one submission. Default 10s.
	PublishTimeout time.Duration
}

// Ticker submits periodic jobs at their ticks. Run one next to every
// scheduler: all of them submit each tick under the same id and exactly one
// submission runs (see Periodic.ID). A tick missed because no scheduler ran
// is not made up. A submission that fails (NATS down) is retried with the
// same id until it is acked or the entry's next tick comes. It is a
// restartable service.
type Ticker struct {
	js      jetstream.JetStream
	entries []Periodic
	cfg     PeriodicConfig
	log     *slog.Logger

	svc startstop.Service
}

// NewTicker returns a stopped Ticker submitting entries on js.
func NewTicker(js jetstream.JetStream, entries []Periodic, cfg PeriodicConfig) (*Ticker, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrConfig)
	}
	for _, e := range entries {
		if e.when == nil {
			return nil, fmt.Errorf("%w: periodic entry %q was not built by ParseSchedule", ErrConfig, e.Name)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 10 * time.Second
	}
	return &Ticker{js: js, entries: entries, cfg: cfg, log: cfg.Logger.With("component", "periodic")}, nil
}

// Start starts ticking. Idempotent.
func (t *Ticker) Start(ctx context.Context) error { return t.svc.Start(ctx, t.loop) }

// Stop stops ticking and waits for a submission in progress. Idempotent;
// Start may follow.
func (t *Ticker) Stop() { t.svc.Stop() }

func (t *Ticker) loop(ctx context.Context) {
	if len(t.entries) == 0 {
		<-ctx.Done()
		return
	}
	now := t.cfg.Now()
	next := make([]time.Time, len(t.entries))
	for i, e := range t.entries {
		next[i] = e.when.Next(now)
	}
	for {
		soonest := next[0]
		for _, n := range next[1:] {
			if n.Before(soonest) {
				soonest = n
			}
		}
		timer := time.NewTimer(time.Until(soonest))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		now = t.cfg.Now()
		for i, e := range t.entries {
			if next[i].After(now) {
				continue
			}
			tick := next[i]
			next[i] = e.when.Next(tick)
			for !next[i].After(now) { // ticks passed while we were busy: skip them
				next[i] = e.when.Next(next[i])
			}
			t.submit(ctx, e, tick, next[i])
		}
	}
}

// submit publishes e's job of tick, retrying until acked or until the
// entry's following tick.
func (t *Ticker) submit(ctx context.Context, e Periodic, tick, until time.Time) {
	spec := e.Spec
	spec.ID = e.ID(tick)
	spec.SubmittedAt = tick.UTC()
	if spec.V == 0 {
		spec.V = job.Version
	}
	data, err := json.Marshal(spec)
	if err != nil {
		t.log.ErrorContext(ctx, "periodic job not submitted", "name", e.Name, "err", err)
		return
	}
	// The operator's file names the tenant of an entry (its spec's tenant);
	// without one it is the default tenant's.
	tenant := spec.Tenant
	if tenant == "" {
		tenant = job.DefaultTenant
	}
	wait := 200 * time.Millisecond
	for {
		msg := nats.NewMsg(job.SubmitSubject(tenant))
		msg.Data = data
		msg.Header.Set(job.HeaderMsgID, spec.ID)
		pctx, cancel := context.WithTimeout(ctx, t.cfg.PublishTimeout)
		ack, err := t.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(job.JobsStream(tenant)))
		cancel()
		if err == nil {
			t.log.InfoContext(ctx, "periodic job submitted", "name", e.Name, "job", spec.ID, "duplicate", ack.Duplicate)
			return
		}
		if ctx.Err() != nil || !time.Now().Add(wait).Before(until) {
			t.log.ErrorContext(ctx, "periodic job not submitted; this tick is skipped", "name", e.Name, "job", spec.ID, "err", err)
			return
		}
		t.log.WarnContext(ctx, "periodic job not submitted yet; retrying", "name", e.Name, "job", spec.ID, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
