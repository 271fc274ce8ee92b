package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
	"go.opentelemetry.io/otel/trace"
)

// MessagingSystemAsynq is the messaging.system value of asynq spans and
// metrics. The semantic conventions list no value for asynq, and custom
// values are allowed.
const MessagingSystemAsynq = "asynq"

// asynq-specific attributes, named after the messaging.<system>.* pattern of
// the conventions (compare messaging.servicebus.message.delivery_count).
const (
	attrAsynqTaskType   attribute.Key = "messaging.asynq.task.type"
	attrAsynqRetryCount attribute.Key = "messaging.asynq.message.retry_count"
)

// Option configures AsynqMiddleware.
type Option func(*options)

type options struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// WithTracerProvider sets the tracer provider. Default: the global one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tp = tp }
}

// WithMeterProvider sets the meter provider. Default: the global one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.mp = mp }
}

// AsynqMiddleware returns asynq middleware that continues the trace found in
// the task headers (written with InjectMap) and wraps each task in a
// consumer span named "process <queue>", following the OpenTelemetry
// messaging conventions: messaging.system=asynq, messaging.operation.name
// and .type=process, messaging.destination.name=queue,
// messaging.message.id=task id, plus messaging.asynq.task.type and
// messaging.asynq.message.retry_count. A failed task sets the span status to
// Error with error.type and records the error (a panic is recorded and
// re-raised for asynq to recover). Each task also records
// messaging.process.duration (s) by system, operation, queue and error.type.
//
// error.type is the ErrorType() string of the first error in the chain that
// has that method (so a handler can report a job reason), else "canceled" or
// "deadline_exceeded" for context errors, else the error's Go type, or
// "_OTHER" for plain errors.New values.
func AsynqMiddleware(opts ...Option) asynq.MiddlewareFunc {
	o := options{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider()}
	for _, opt := range opts {
		opt(&o)
	}
	tracer := o.tp.Tracer(scopeName, trace.WithSchemaURL(semconv.SchemaURL))
	meter := o.mp.Meter(scopeName, metric.WithSchemaURL(semconv.SchemaURL))
	duration, err := messagingconv.NewProcessDuration(meter, metric.WithExplicitBucketBoundaries(DurationBuckets...))
	if err != nil {
		otel.Handle(fmt.Errorf("telemetry: asynq middleware: %w", err)) // duration is a no-op then
	}

	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			// Always W3C (Propagator(), what InjectMap writes), not the
			// global propagator: a process that installed no globals still
			// joins the trace.
			ctx = w3c.Extract(ctx, HeaderMapCarrier(t.Headers()))
			queue, _ := asynq.GetQueueName(ctx)
			id, _ := asynq.GetTaskID(ctx)
			retried, _ := asynq.GetRetryCount(ctx)
			name := "process"
			if queue != "" {
				name += " " + queue
			}
			ctx, span := tracer.Start(ctx, name,
				trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					semconv.MessagingSystemKey.String(MessagingSystemAsynq),
					semconv.MessagingOperationName("process"),
					semconv.MessagingOperationTypeProcess,
					semconv.MessagingDestinationName(queue),
					semconv.MessagingMessageID(id),
					attrAsynqTaskType.String(t.Type()),
					attrAsynqRetryCount.Int(retried),
				))
			start := time.Now()

			finish := func(err error) {
				metricAttrs := []attribute.KeyValue{duration.AttrDestinationName(queue)}
				if err != nil {
					et := errorType(err)
					span.SetAttributes(semconv.ErrorTypeKey.String(et))
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
					metricAttrs = append(metricAttrs, duration.AttrErrorType(messagingconv.ErrorTypeAttr(et)))
				}
				// The duration first: whoever sees the span ended (a test's
				// exporter) finds the task's duration recorded too.
				duration.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), "process",
					messagingconv.SystemAttr(MessagingSystemAsynq), metricAttrs...)
				span.End()
			}
			defer func() {
				if r := recover(); r != nil {
					finish(panicError{r})
					panic(r)
				}
			}()
			err := next.ProcessTask(ctx, t)
			finish(err)
			return err
		})
	}
}

// panicError carries a recovered panic value into span and metric.
type panicError struct{ v any }

func (e panicError) Error() string     { return fmt.Sprintf("panic: %v", e.v) }
func (e panicError) ErrorType() string { return "panic" }

// errorType picks a low-cardinality error.type for err (see AsynqMiddleware).
func errorType(err error) string {
	var typed interface{ ErrorType() string }
	if errors.As(err, &typed) {
		if s := typed.ErrorType(); s != "" {
			return s
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	s := semconv.ErrorType(err).Value.AsString()
	if s == "*errors.errorString" {
		return semconv.ErrorTypeOther.Value.AsString()
	}
	return s
}
