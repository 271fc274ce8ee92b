package client

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/telemetry/propagate"
)

// TracerName is the instrumentation name of the default tracer.
const TracerName = "github.com/paddockhq/paddock/client"

// Config configures a Client. A zero field takes its default.
type Config struct {
	// Tenant is the tenant the client submits, reads and cancels as
	// (job.CheckTenant). Default job.DefaultTenant, the tenant of a fleet
	// without authentication. With tenant credentials it must be the
	// credentials' tenant, and the connection must use the tenant's inbox
	// prefix (job.InboxPrefix): Connect with ConnectConfig.Tenant does both.
	Tenant string
	// Logger, default slog.Default(); the client logs with component=client.
	Logger *slog.Logger
	// Tracer, default otel.Tracer(TracerName).
	Tracer trace.Tracer
	// Propagator, default otel.GetTextMapPropagator() (read at each use).
	Propagator propagation.TextMapPropagator
	// PublishTimeout bounds one exchange with NATS made without a ctx
	// deadline: the wait for JetStream's ack of a submission (Submit, and
	// each item of SubmitBatch), a Get, a Cancel, and each look-up of Wait
	// and WaitAll. Default 10s.
	PublishTimeout time.Duration
	// BatchWindow is the number of unacknowledged publishes SubmitBatch keeps
	// in flight. Default 256.
	BatchWindow int
	// Now, default time.Now; stamps Spec.SubmittedAt.
	Now func() time.Time
}

func (c Config) withDefaults() (Config, error) {
	if c.PublishTimeout < 0 || c.BatchWindow < 0 {
		return c, fmt.Errorf("%w: negative PublishTimeout or BatchWindow", ErrConfig)
	}
	c.Tenant = cmp.Or(c.Tenant, job.DefaultTenant)
	if err := job.CheckTenant(c.Tenant); err != nil {
		return c, fmt.Errorf("%w: Tenant: %w", ErrConfig, err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Tracer == nil {
		c.Tracer = otel.Tracer(TracerName)
	}
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 10*time.Second)
	c.BatchWindow = cmp.Or(c.BatchWindow, 256)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Client submits jobs and reads their results as one tenant. It is safe for
// concurrent use. It does not own the NATS connection.
//
// It uses only the subjects a tenant's credentials allow (package tenant):
// publish on the tenant's submit and cancel subjects and direct gets of its
// results; subscribe to its results and its inbox. Submitting, waiting and
// cancelling call the JetStream API no other way; agent I/O (io.go) reads
// the tenant's own output stream and buckets (stream info and direct gets:
// no consumer, see direct.go) and writes its input bucket.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	cfg     Config
	tenant  string
	log     *slog.Logger
	replies replyMux // request.go
	stores  sync.Map // bucket name → jetstream.ObjectStore (io.go)
}

// New returns a Client over nc for cfg.Tenant.
func New(nc *nats.Conn, cfg Config) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{nc: nc, js: js, cfg: cfg, tenant: cfg.Tenant, log: cfg.Logger.With("component", "client", "tenant", cfg.Tenant)}
	if cfg.Tenant != job.DefaultTenant && nc.Opts.InboxPrefix != job.InboxPrefix(cfg.Tenant) {
		c.log.Warn("the NATS connection does not use the tenant's inbox prefix: with tenant credentials "+
			"every reply is refused; connect with client.Connect(ConnectConfig{Tenant: …}) or nats.CustomInboxPrefix",
			"inbox_prefix", nc.Opts.InboxPrefix, "want", job.InboxPrefix(cfg.Tenant))
	}
	return c, nil
}

// Tenant returns the tenant the client acts as.
func (c *Client) Tenant() string { return c.tenant }

// Close releases the client's asynchronous-publish state (SubmitBatch) and
// its reply subscription. It does not close the NATS connection.
func (c *Client) Close() {
	c.js.CleanupPublisher()
	c.replies.close()
}

// Submission is the outcome of submitting one spec.
type Submission struct {
	// ID is the job id (assigned when the spec had none).
	ID string
	// Duplicate is true when JetStream already held a submission with this
	// id (within its duplicate window): the job is not submitted twice.
	Duplicate bool
	// Seq is the submission's JetStream stream sequence.
	Seq uint64
	// Err is this item's failure in a SubmitBatch (nil for Submit, which
	// returns it). A context error means the publish may or may not have
	// been stored: submitting the same spec with the same ID again is safe.
	Err error
}

// Submit publishes spec on the tenant's subject (job.SubmitSubject) and
// waits until JetStream has stored it in the tenant's stream
// (job.JobsStream). It fills in the id (NewID) when empty, the version, and
// SubmittedAt when zero. A spec failing the client-side checks (id format,
// command present and at most job.MaxCommandBytes, document at most
// job.MaxSpecBytes, no other tenant named) returns an error wrapping
// job.ErrInvalid and publishes nothing. A tenant at its max-queued quota
// gets a *QuotaError (errors.Is ErrQuota), a full stream a
// *StreamFullError (errors.Is ErrStreamFull); neither stores anything. The
// scheduler does the full validation against the operator's caps and
// records a `rejected` result for what it refuses. opts (options.go) add
// scheduling options such as NotBefore.
func (c *Client) Submit(ctx context.Context, spec job.Spec, opts ...SubmitOption) (Submission, error) {
	msg, spec, err := c.prepare(spec)
	if err != nil {
		return Submission{ID: spec.ID}, err
	}
	applyOptions(msg, opts)
	ctx, span := c.startSubmit(ctx, msg, spec.ID)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.PublishTimeout)
		defer cancel()
	}
	ack, err := c.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(job.JobsStream(c.tenant)))
	if err != nil {
		err = c.publishErr(spec.ID, err)
		endSpan(span, err)
		return Submission{ID: spec.ID}, err
	}
	span.SetAttributes(attribute.Bool(job.AttrDuplicate, ack.Duplicate))
	span.End()
	return Submission{ID: spec.ID, Duplicate: ack.Duplicate, Seq: ack.Sequence}, nil
}

// BatchError reports the failed items of a SubmitBatch; each failed
// Submission has its Err set.
type BatchError struct {
	Total, Failed int
	// Errs are the distinct item errors (by message), at most 10.
	Errs []error
}

func (e *BatchError) Error() string {
	msg := fmt.Sprintf("client: %d of %d submissions failed: %v", e.Failed, e.Total, e.Errs[0])
	if len(e.Errs) > 1 {
		msg += fmt.Sprintf(" (and %d other errors)", len(e.Errs)-1)
	}
	return msg
}

// Unwrap lets errors.Is/As see the item errors.
func (e *BatchError) Unwrap() []error { return e.Errs }

// SubmitBatch submits specs with up to Config.BatchWindow publishes in
// flight. It returns one Submission per spec, in order, and a *BatchError
// when any item failed (its Submission.Err says why; the others are
// stored). progress, if not nil, is called after each item with the number
// of items settled so far; the calls come one at a time from a goroutine of
// SubmitBatch. Canceling ctx fails the items not yet confirmed. opts apply
// to every item.
func (c *Client) SubmitBatch(ctx context.Context, specs []job.Spec, progress func(done, total int), opts ...SubmitOption) ([]Submission, error) {
	subs := make([]Submission, len(specs))
	type inflight struct {
		i    int
		fut  jetstream.PubAckFuture // nil when the item failed before publishing
		span trace.Span
	}
	// The channel's capacity is the window: the producer blocks while
	// BatchWindow publishes await their acks. Acks arrive in publish order,
	// so awaiting them in that order costs nothing.
	window := make(chan inflight, c.cfg.BatchWindow)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for n := 1; ; n++ {
			f, ok := <-window
			if !ok {
				return
			}
			if f.fut != nil {
				select {
				case ack := <-f.fut.Ok():
					subs[f.i].Seq, subs[f.i].Duplicate = ack.Sequence, ack.Duplicate
				case err := <-f.fut.Err():
					subs[f.i].Err = c.publishErr(subs[f.i].ID, err)
				case <-ctx.Done():
					subs[f.i].Err = fmt.Errorf("client: submit %s: ack not received: %w", subs[f.i].ID, ctx.Err())
				}
			}
			if f.span != nil {
				endSpan(f.span, subs[f.i].Err)
			}
			if progress != nil {
				progress(n, len(specs))
			}
		}
	}()
	for i, spec := range specs {
		msg, spec, err := c.prepare(spec)
		subs[i].ID = spec.ID
		if err == nil {
			applyOptions(msg, opts)
		}
		if err == nil && ctx.Err() != nil {
			err = fmt.Errorf("client: submit %s: %w", spec.ID, ctx.Err())
		}
		f := inflight{i: i}
		if err == nil {
			_, f.span = c.startSubmit(ctx, msg, spec.ID)
			f.fut, err = c.js.PublishMsgAsync(msg,
				jetstream.WithExpectStream(job.JobsStream(c.tenant)),
				jetstream.WithStallWait(c.cfg.PublishTimeout))
			if err != nil {
				err = c.publishErr(spec.ID, err)
			}
		}
		subs[i].Err = err
		window <- f
	}
	close(window)
	<-collected
	return subs, batchError(subs)
}

func batchError(subs []Submission) error {
	e := &BatchError{Total: len(subs)}
	seen := map[string]bool{}
	for _, s := range subs {
		if s.Err == nil {
			continue
		}
		e.Failed++
		if msg := s.Err.Error(); !seen[msg] && len(e.Errs) < 10 {
			seen[msg] = true
			e.Errs = append(e.Errs, s.Err)
		}
	}
	if e.Failed == 0 {
		return nil
	}
	return e
}

// prepare completes spec, checks what the client can check without the
// operator's caps, and builds the message.
func (c *Client) prepare(spec job.Spec) (*nats.Msg, job.Spec, error) {
	if spec.ID == "" {
		spec.ID = NewID()
	}
	spec.V = cmp.Or(spec.V, job.Version)
	if spec.SubmittedAt.IsZero() {
		spec.SubmittedAt = c.cfg.Now().UTC()
	}
	var fields []job.FieldError
	if !job.ValidID(spec.ID) {
		fields = append(fields, job.FieldError{Field: "id", Message: "must match [A-Za-z0-9._-]{1,128}"})
	}
	if spec.Tenant != "" && spec.Tenant != c.tenant {
		fields = append(fields, job.FieldError{Field: "tenant",
			Message: fmt.Sprintf("%q is not the client's tenant %q; leave it out (the fleet takes the tenant from the credentials)", spec.Tenant, c.tenant)})
	}
	switch {
	case strings.TrimSpace(spec.Command) == "":
		fields = append(fields, job.FieldError{Field: "command", Message: "must not be empty"})
	case len(spec.Command) > job.MaxCommandBytes:
		fields = append(fields, job.FieldError{Field: "command", Message: fmt.Sprintf("is %d bytes; at most %d allowed", len(spec.Command), job.MaxCommandBytes)})
	}
	if len(fields) > 0 {
		return nil, spec, &job.ValidationError{Fields: fields}
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, spec, fmt.Errorf("client: encode spec %s: %w", spec.ID, err)
	}
	if len(data) > job.MaxSpecBytes {
		return nil, spec, &job.ValidationError{Fields: []job.FieldError{{Field: "spec",
			Message: fmt.Sprintf("document is %d bytes; at most %d allowed", len(data), job.MaxSpecBytes)}}}
	}
	msg := nats.NewMsg(job.SubmitSubject(c.tenant))
	msg.Data = data
	msg.Header.Set(job.HeaderMsgID, spec.ID)
	return msg, spec, nil
}

// startSubmit starts the job's producer span and puts its context in msg.
func (c *Client) startSubmit(ctx context.Context, msg *nats.Msg, id string) (context.Context, trace.Span) {
	ctx, span := c.cfg.Tracer.Start(ctx, "paddock.submit",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", msg.Subject),
			attribute.String(job.AttrTenant, c.tenant),
			attribute.String(job.AttrJobID, id),
		))
	c.propagator().Inject(ctx, propagate.NATSHeaderCarrier(msg.Header))
	return ctx, span
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (c *Client) propagator() propagation.TextMapPropagator {
	if c.cfg.Propagator != nil {
		return c.cfg.Propagator
	}
	return propagate.Propagator() // the wire format is W3C whatever the globals are
}
