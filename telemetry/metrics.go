package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// DurationBuckets are the histogram boundaries, in seconds, of every
// duration Paddock records: 1 ms to 300 s (the job session cap), roughly
// 1-2.5-5 per decade.
var DurationBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300,
}

// Metrics holds Paddock's own instruments. Build it once per process with
// NewMetrics; its methods are safe for concurrent use, and on a nil
// *Metrics they do nothing, so a component can take an optional *Metrics.
//
// Prometheus names (as MetricsHandler serves them) are in docs/telemetry.md.
type Metrics struct {
	meter metric.Meter

	jobsFinished     metric.Int64Counter
	queueWait        metric.Float64Histogram
	runDuration      metric.Float64Histogram
	poolSize         metric.Int64ObservableGauge
	poolHits         metric.Int64Counter
	poolColdStarts   metric.Int64Counter
	healAttempts     metric.Int64Counter
	healEvents       metric.Int64Counter
	llmTokens        metric.Int64Counter
	leaseWait        metric.Float64Histogram
	leaseLost        metric.Int64Counter
	containersReaped metric.Int64Counter
	submissions      metric.Int64Counter
	streamFull       metric.Int64Counter
	runsRescued      metric.Int64Counter
	failovers        metric.Int64Counter
	natsReconnects   metric.Int64ObservableCounter
}

// AttrStream is the JetStream stream a metric is about (PADDOCK_JOBS,
// PADDOCK_RESULTS).
const AttrStream attribute.Key = "paddock.stream"

// NewMetrics creates the instruments on meter.
func NewMetrics(meter metric.Meter) (*Metrics, error) {
	m := &Metrics{meter: meter}
	buckets := metric.WithExplicitBucketBoundaries(DurationBuckets...)
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), buckets)
		errs = append(errs, err)
		return h
	}
	m.jobsFinished = counter("paddock.jobs.finished", "{job}",
		"Jobs that reached a terminal state, by queue, state and reason.")
	m.queueWait = histogram("paddock.job.wait.duration",
		"Time from enqueue to the start of processing, by queue.")
	m.runDuration = histogram("paddock.job.run.duration",
		"Time from the start of processing to the terminal state, by queue and reason.")
	m.poolHits = counter("paddock.pool.hits", "{container}",
		"Jobs that took a pre-started container from the warm pool.")
	m.poolColdStarts = counter("paddock.pool.cold_starts", "{container}",
		"Jobs that had to start a container because the warm pool was empty.")
	m.healAttempts = counter("paddock.heal.attempts", "{attempt}",
		"Repairs tried by the heal loop, by action and outcome.")
	m.healEvents = counter("paddock.heal.events", "{event}",
		"What the heal loop did, by event: install, install_failure, rule_repair, llm_call, llm_error, llm_refused, memo_hit, memo_miss, memo_error, memo_store, memo_delete.")
	m.llmTokens = counter("paddock.heal.llm.tokens", "{token}",
		"Tokens the heal loop's LLM calls used (as the endpoint reported them, else estimated).")
	m.leaseWait = histogram("paddock.lease.wait.duration",
		"Time spent waiting for a volume lease, by whether it was acquired.")
	m.leaseLost = counter("paddock.lease.lost", "{lease}",
		"Volume leases lost while a job ran.")
	m.containersReaped = counter("paddock.containers.reaped", "{container}",
		"Leaked containers removed by the reaper.")
	m.submissions = counter("paddock.submissions", "{submission}",
		"Submissions seen by the scheduler, by outcome (accepted, rejected, duplicate).")
	m.streamFull = counter("paddock.stream.full", "{message}",
		"Publishes JetStream refused because the stream (or the server's JetStream storage) was full, by stream.")
	m.runsRescued = counter("paddock.runs.rescued", "{run}",
		"Runs of dead workers this process's rescuer enqueued again (internal/asynqx.Rescuer).")
	m.failovers = counter("paddock.failovers.seen", "{failover}",
		"Failovers of the shared services this process observed, by service and kind: redis master (the master changed), nats stream_leader (a stream's leader changed).")
	var err error
	m.natsReconnects, err = meter.Int64ObservableCounter("paddock.nats.reconnects", metric.WithUnit("{reconnect}"),
		metric.WithDescription("Reconnects of this process's NATS connections (to another server of the cluster, or the same one back)."))
	errs = append(errs, err)
	m.poolSize, err = meter.Int64ObservableGauge("paddock.pool.size", metric.WithUnit("{container}"),
		metric.WithDescription("Pre-started containers ready in the warm pool."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: metrics: %w", err)
	}
	return m, nil
}

// JobFinished counts a job that reached its terminal state. tenant is a
// label of bounded cardinality: tenants are made by the operator.
func (m *Metrics) JobFinished(ctx context.Context, tenant, queue, state, reason string) {
	if m == nil {
		return
	}
	m.jobsFinished.Add(ctx, 1, metric.WithAttributes(AttrTenant.String(tenant),
		AttrQueue.String(queue), AttrState.String(state), AttrReason.String(reason)))
}

// QueueWait records how long a job waited in queue before processing began.
func (m *Metrics) QueueWait(ctx context.Context, queue string, d time.Duration) {
	if m == nil {
		return
	}
	m.queueWait.Record(ctx, d.Seconds(), metric.WithAttributes(AttrQueue.String(queue)))
}

// RunDuration records how long a job ran, from the start of processing to
// its terminal state.
func (m *Metrics) RunDuration(ctx context.Context, queue, reason string, d time.Duration) {
	if m == nil {
		return
	}
	m.runDuration.Record(ctx, d.Seconds(), metric.WithAttributes(AttrQueue.String(queue), AttrReason.String(reason)))
}

// PoolHit counts a job served by a warm-pool container.
func (m *Metrics) PoolHit(ctx context.Context) {
	if m == nil {
		return
	}
	m.poolHits.Add(ctx, 1)
}

// PoolColdStart counts a job that had to start its container.
func (m *Metrics) PoolColdStart(ctx context.Context) {
	if m == nil {
		return
	}
	m.poolColdStarts.Add(ctx, 1)
}

// RegisterPoolSize reports size() as paddock.pool.size at each collection.
// size runs on the collecting goroutine (a scrape) and must be cheap and
// safe for concurrent use. Unregister the returned registration when the
// pool stops.
func (m *Metrics) RegisterPoolSize(size func() int64) (metric.Registration, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil *Metrics", ErrInvalidConfig)
	}
	return m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(m.poolSize, size())
		return nil
	}, m.poolSize)
}

// HealAttempt counts one repair of the heal loop.
func (m *Metrics) HealAttempt(ctx context.Context, action, outcome string) {
	if m == nil {
		return
	}
	m.healAttempts.Add(ctx, 1, metric.WithAttributes(AttrHealAction.String(action), AttrHealOutcome.String(outcome)))
}

// AttrHealEvent is the heal loop's event a metric counts.
const AttrHealEvent attribute.Key = "paddock.heal.event"

// HealEvent counts an event of the heal loop (healer.Metrics.Event): n
// tokens for llm_tokens, else one event.
func (m *Metrics) HealEvent(ctx context.Context, event string, n int64) {
	if m == nil {
		return
	}
	if event == "llm_tokens" {
		m.llmTokens.Add(ctx, n)
		return
	}
	m.healEvents.Add(ctx, n, metric.WithAttributes(AttrHealEvent.String(event)))
}

// LeaseWait records a wait for a volume lease and whether it ended with the
// lease held.
func (m *Metrics) LeaseWait(ctx context.Context, d time.Duration, acquired bool) {
	if m == nil {
		return
	}
	m.leaseWait.Record(ctx, d.Seconds(), metric.WithAttributes(AttrLeaseAcquired.Bool(acquired)))
}

// LeaseLost counts a lease lost while its job ran.
func (m *Metrics) LeaseLost(ctx context.Context) {
	if m == nil {
		return
	}
	m.leaseLost.Add(ctx, 1)
}

// ContainersReaped counts n containers removed by the reaper.
func (m *Metrics) ContainersReaped(ctx context.Context, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.containersReaped.Add(ctx, int64(n))
}

// Submission counts a submission by outcome: SubmissionAccepted,
// SubmissionRejected or SubmissionDuplicate.
func (m *Metrics) Submission(ctx context.Context, tenant, outcome string) {
	if m == nil {
		return
	}
	m.submissions.Add(ctx, 1, metric.WithAttributes(AttrTenant.String(tenant), AttrSubmissionOutcome.String(outcome)))
}

// StreamFull counts a publish JetStream refused because stream (or the
// server's JetStream storage) was full.
func (m *Metrics) StreamFull(ctx context.Context, stream string) {
	if m == nil {
		return
	}
	m.streamFull.Add(ctx, 1, metric.WithAttributes(AttrStream.String(stream)))
}

// RunRescued counts a run of a dead worker the rescuer enqueued again.
func (m *Metrics) RunRescued(ctx context.Context) {
	if m == nil {
		return
	}
	m.runsRescued.Add(ctx, 1)
}

// The services and kinds of FailoverSeen.
const (
	AttrFailoverService attribute.Key = "paddock.failover.service" // redis, nats
	AttrFailoverKind    attribute.Key = "paddock.failover.kind"    // master, stream_leader
)

// FailoverSeen counts a failover this process observed: service "redis",
// kind "master" (the master's replication id changed: a replica was
// promoted, or the master restarted); service "nats", kind
// "stream_leader" (a stream's leader moved to another server).
func (m *Metrics) FailoverSeen(ctx context.Context, service, kind string) {
	if m == nil {
		return
	}
	m.failovers.Add(ctx, 1, metric.WithAttributes(AttrFailoverService.String(service), AttrFailoverKind.String(kind)))
}

// RegisterReconnects reports reconnects() as paddock.nats.reconnects, the
// reconnects so far of this process's NATS connection (nats.Conn.Stats's
// Reconnects), at each collection. Unregister the registration when the
// connection closes.
func (m *Metrics) RegisterReconnects(reconnects func() uint64) (metric.Registration, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil *Metrics", ErrInvalidConfig)
	}
	return m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(m.natsReconnects, int64(reconnects()))
		return nil
	}, m.natsReconnects)
}

// QueueInspector is the part of *asynq.Inspector that RegisterQueueGauges
// uses.
type QueueInspector interface {
	Queues() ([]string, error)
	GetQueueInfo(queue string) (*asynq.QueueInfo, error)
}

// RegisterQueueGauges reports, per asynq queue (attribute paddock.queue):
// paddock.queue.size (all tasks the queue holds, including scheduled, retry,
// archived and completed), paddock.queue.pending, paddock.queue.active and
// paddock.queue.latency (age of the oldest pending task, in seconds).
//
// Each collection (each scrape of MetricsHandler) calls Queues and then
// GetQueueInfo per queue on Redis; asynq gives these calls no context, so a
// slow Redis slows the scrape. A failing queue is left out of that
// collection and its error goes to the otel error handler; the other queues
// are still reported. Register it in one process per fleet (the scheduler),
// not in every worker. Unregister the returned registration on shutdown.
func RegisterQueueGauges(meter metric.Meter, inspector QueueInspector) (metric.Registration, error) {
	var errs []error
	gauge := func(name, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit("{task}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	size := gauge("paddock.queue.size", "Tasks held by the asynq queue in any state.")
	pending := gauge("paddock.queue.pending", "Tasks ready to be processed.")
	active := gauge("paddock.queue.active", "Tasks being processed.")
	latency, err := meter.Float64ObservableGauge("paddock.queue.latency", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest pending task."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: queue gauges: %w", err)
	}

	return meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		queues, err := inspector.Queues()
		if err != nil {
			return fmt.Errorf("telemetry: list asynq queues: %w", err)
		}
		var errs []error
		for _, q := range queues {
			info, err := inspector.GetQueueInfo(q)
			if err != nil {
				errs = append(errs, fmt.Errorf("telemetry: asynq queue %q: %w", q, err))
				continue
			}
			attrs := metric.WithAttributeSet(attribute.NewSet(AttrQueue.String(q)))
			o.ObserveInt64(size, int64(info.Size), attrs)
			o.ObserveInt64(pending, int64(info.Pending), attrs)
			o.ObserveInt64(active, int64(info.Active), attrs)
			o.ObserveFloat64(latency, info.Latency.Seconds(), attrs)
		}
		return errors.Join(errs...)
	}, size, pending, active, latency)
}
