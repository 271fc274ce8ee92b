package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/paddockhq/paddock/telemetry"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// ErrConfig is wrapped by every invalid-configuration error of New.
var ErrConfig = errors.New("scheduler: invalid config")

// TracerName is the instrumentation name of the default tracer.
const TracerName = "github.com/paddockhq/paddock/scheduler"

// TaskTimeoutMargin is added to a job's timeout to form the asynq task
// timeout, so that the worker's own job deadline fires first and the task
// deadline only catches a stuck handler.
const TaskTimeoutMargin = 2 * time.Minute

// Config configures a Scheduler. A zero field takes its default, filled in
// withDefaults.
type Config struct {
	// Caps are the operator's limits every spec is validated against.
	Caps job.Caps
	// Grants checks the secrets broker's grants a job names against its
	// tenant's; nil: the fleet runs no broker and a job naming a grant is
	// rejected.
	Grants GrantChecker
	// Tasks finds held jobs whose task Redis lost (a Sentinel failover
	// drops the last writes before it), so that their submissions are
	// handed back and scheduled again; nil: not checked.
	Tasks TaskFinder
	// NoWakeups: do not publish a wake-up (job.WakeSubject) after each
	// enqueue. Workers with wake-ups on then find a job at their idle poll
	// (--task-check-interval, 1 s) instead of at once.
	NoWakeups bool
	// Consumer is the durable consumer name shared by all schedulers.
	// Default job.ConsumerSchedulers.
	Consumer string
	// Concurrency bounds the messages processed at once, and the messages
	// pulled ahead. Default 8.
	Concurrency int
	// AckWait is the consumer's ack deadline; a message unacked after it is
	// redelivered (a crashed scheduler's messages come back after AckWait).
	// Each message is processed within AckWait/2. Default 30s.
	AckWait time.Duration
	// MaxDeliver is the number of deliveries after which a job that still
	// cannot be enqueued ends with an `infra` result. Default 10; negative:
	// retry forever. Failures to reach Redis never end a job: its message
	// waits for Redis.
	MaxDeliver int
	// MaxRetry is the asynq retry budget of a task (infrastructure retries;
	// the job's own failures are terminal). Default 3; negative: none.
	MaxRetry int
	// TaskRetention keeps a completed task (and with it the TaskID
	// de-duplication) in Redis. Default 24h.
	TaskRetention time.Duration
	// BackoffMin and BackoffMax bound the redelivery delay after a failure
	// (doubling per delivery, ±20% jitter). Default 1s and 30s.
	BackoffMin, BackoffMax time.Duration
	// ShutdownTimeout bounds how long Stop waits for messages in flight.
	// Default 10s.
	ShutdownTimeout time.Duration
	// Logger, default slog.Default(); the scheduler logs with
	// component=scheduler.
	Logger *slog.Logger
	// Tracer, default otel.Tracer(TracerName).
	Tracer trace.Tracer
	// Propagator, default otel.GetTextMapPropagator() (read at each use).
	Propagator propagation.TextMapPropagator
	// Metrics, optional: submissions by outcome.
	Metrics *telemetry.Metrics
	// Streams sizes the tenants' streams the scheduler creates.
	Streams results.StreamConfig
	// Tenants are the tenants whose streams this scheduler consumes, and
	// their quotas. Default StaticTenants{{Tenant: job.DefaultTenant}}.
	Tenants TenantSource
	// MaxRunning is a tenant's default max-running (Quota.MaxRunning 0):
	// its consumer's MaxAckPending. Default 64.
	MaxRunning int
	// Slots bounds the jobs this scheduler holds (in the queue or running)
	// across all tenants; a tenant's next job waits for a free slot, and
	// waiting tenants take freed slots in turn (fair share). 0: no bound.
	// Set it to the fleet's job slots (workers × concurrency): then a new
	// tenant's job waits for one freed slot, never behind another tenant's
	// admitted jobs (docs/scheduling.md has the measurement).
	Slots int
	// AutoSlots, when set, sizes Slots at start and every 10 s instead
	// (every 2 s while it returns 0: no worker yet) (it
	// returns the fleet's job slots for this scheduler; cmd/paddock counts
	// the workers' concurrency and the schedulers in Redis). At least 1.
	AutoSlots func(context.Context) (int, error)
	// HoldCheck is how often held jobs are checked for a result that the
	// result subscription missed (and kept alive). Default 10s; at most
	// AckWait/3 is used.
	HoldCheck time.Duration
	// Now, default time.Now.
	Now func() time.Time
}

var consumerPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (c Config) withDefaults() (Config, error) {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.Consumer == "" {
		c.Consumer = job.ConsumerSchedulers
	}
	if !consumerPattern.MatchString(c.Consumer) {
		bad("Consumer %q must match [A-Za-z0-9_-]{1,64}", c.Consumer)
	}
	if c.Concurrency < 0 {
		bad("Concurrency %d is negative", c.Concurrency)
	}
	c.Concurrency = cmp.Or(c.Concurrency, 8)
	c.AckWait = cmp.Or(c.AckWait, 30*time.Second)
	if c.AckWait < time.Second {
		bad("AckWait %s is below 1s", c.AckWait)
	}
	c.MaxDeliver = cmp.Or(c.MaxDeliver, 10)
	c.MaxRetry = cmp.Or(c.MaxRetry, 3)
	if c.MaxRetry < 0 {
		c.MaxRetry = 0
	}
	c.TaskRetention = cmp.Or(c.TaskRetention, 24*time.Hour)
	if c.TaskRetention < 0 {
		bad("TaskRetention %s is negative", c.TaskRetention)
	}
	c.BackoffMin = cmp.Or(c.BackoffMin, time.Second)
	c.BackoffMax = cmp.Or(c.BackoffMax, max(30*time.Second, c.BackoffMin))
	if c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin {
		bad("backoff [%s, %s] is not a valid range", c.BackoffMin, c.BackoffMax)
	}
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 10*time.Second)
	if c.ShutdownTimeout < 0 {
		bad("ShutdownTimeout %s is negative", c.ShutdownTimeout)
	}
	if c.Tenants == nil {
		c.Tenants = StaticTenants{{Tenant: job.DefaultTenant}}
	}
	c.MaxRunning = cmp.Or(c.MaxRunning, 64)
	c.HoldCheck = cmp.Or(c.HoldCheck, 10*time.Second)
	if c.MaxRunning < 0 || c.Slots < 0 || c.HoldCheck < 0 {
		bad("MaxRunning %d, Slots %d and HoldCheck %s must not be negative", c.MaxRunning, c.Slots, c.HoldCheck)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Tracer == nil {
		c.Tracer = otel.Tracer(TracerName)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Caps = c.Caps.WithDefaults()
	if len(errs) > 0 {
		return c, fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return c, nil
}
