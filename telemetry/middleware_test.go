package telemetry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// quietLogger keeps asynq's server log out of the test output.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// reasonError is a handler error that names its error.type, as a worker's
// job-failure error would.
type reasonError struct{ reason string }

func (e reasonError) Error() string     { return "job failed: " + e.reason }
func (e reasonError) ErrorType() string { return e.reason }

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestAsynqMiddleware enqueues tasks through real Redis with the producer's
// trace context in the task headers and processes them with a real asynq
// server wrapped in the middleware.
func TestAsynqMiddleware(t *testing.T) {
	t.Parallel()
	redis := testsvc.StartRedis(t)
	opt := asynq.RedisClientOpt{Network: redis.Network, Addr: redis.Addr}
	rec := newRecording(t)
	const queue = "jobs"

	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency: 3, Queues: map[string]int{queue: 1}, Logger: quietLogger{},
		TaskCheckInterval: 10 * time.Millisecond,
	})
	mux := asynq.NewServeMux()
	mux.Use(AsynqMiddleware(WithTracerProvider(rec.tp), WithMeterProvider(rec.mp)))
	seen := make(chan trace.SpanContext, 3)
	mux.HandleFunc("paddock:test", func(ctx context.Context, task *asynq.Task) error {
		seen <- trace.SpanContextFromContext(ctx)
		switch string(task.Payload()) {
		case "fail":
			return fmt.Errorf("attempt: %w", errors.Join(reasonError{"timeout"}, asynq.SkipRetry))
		case "panic":
			panic("handler bug")
		}
		return nil
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	client := asynq.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	parents := map[string]trace.SpanContext{}
	for _, payload := range []string{"ok", "fail", "panic"} {
		ctx, span := rec.tp.Tracer("test").Start(context.Background(), "send "+queue, trace.WithSpanKind(trace.SpanKindProducer))
		headers := map[string]string{}
		InjectMap(ctx, headers)
		task := asynq.NewTaskWithHeaders("paddock:test", []byte(payload), headers)
		_, err := client.EnqueueContext(ctx, task, asynq.Queue(queue), asynq.TaskID("task-"+payload), asynq.MaxRetry(0))
		require.NoError(t, err)
		span.End()
		parents["task-"+payload] = span.SpanContext()
	}

	processed := map[string]sdktrace.ReadOnlySpan{}
	require.Eventually(t, func() bool {
		for _, s := range rec.spans.Ended() {
			if s.Name() == "process "+queue {
				processed[attrOf(s, "messaging.message.id").AsString()] = s
			}
		}
		return len(processed) == 3
	}, 10*time.Second, 10*time.Millisecond)

	for id, s := range processed {
		parent := parents[id]
		assert.Equal(t, parent.TraceID(), s.SpanContext().TraceID(), id)
		assert.Equal(t, parent.SpanID(), s.Parent().SpanID(), id)
		assert.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		assert.Equal(t, "asynq", attrOf(s, "messaging.system").AsString())
		assert.Equal(t, "process", attrOf(s, "messaging.operation.name").AsString())
		assert.Equal(t, "process", attrOf(s, "messaging.operation.type").AsString())
		assert.Equal(t, queue, attrOf(s, "messaging.destination.name").AsString())
		assert.Equal(t, "paddock:test", attrOf(s, "messaging.asynq.task.type").AsString())
		assert.Equal(t, int64(0), attrOf(s, "messaging.asynq.message.retry_count").AsInt64())
	}
	for range 3 {
		sc := <-seen
		assert.True(t, sc.IsValid(), "the handler runs inside the process span")
	}

	ok, fail, pnc := processed["task-ok"], processed["task-fail"], processed["task-panic"]
	assert.Equal(t, codes.Unset, ok.Status().Code)
	assert.False(t, attrOf(ok, "error.type").AsBool())
	assert.Equal(t, codes.Error, fail.Status().Code)
	assert.Equal(t, "timeout", attrOf(fail, "error.type").AsString())
	assert.Contains(t, fail.Status().Description, "job failed: timeout")
	require.NotEmpty(t, fail.Events())
	assert.Equal(t, "exception", fail.Events()[0].Name)
	assert.Equal(t, codes.Error, pnc.Status().Code)
	assert.Equal(t, "panic", attrOf(pnc, "error.type").AsString())
	assert.Contains(t, pnc.Status().Description, "handler bug")

	hist, ok2 := rec.metric(t, "messaging.process.duration").Data.(metricdata.Histogram[float64])
	require.True(t, ok2)
	byErrorType := map[string]uint64{}
	for _, dp := range hist.DataPoints {
		et, _ := dp.Attributes.Value("error.type")
		q, _ := dp.Attributes.Value("messaging.destination.name")
		sys, _ := dp.Attributes.Value("messaging.system")
		assert.Equal(t, queue, q.AsString())
		assert.Equal(t, "asynq", sys.AsString())
		assert.Equal(t, DurationBuckets, dp.Bounds)
		byErrorType[et.AsString()] += dp.Count
	}
	assert.Equal(t, map[string]uint64{"": 1, "timeout": 1, "panic": 1}, byErrorType)
}

// TestAsynqMiddlewareWithoutHeaders: a task enqueued without trace context
// starts a new trace.
func TestAsynqMiddlewareWithoutHeaders(t *testing.T) {
	t.Parallel()
	rec := newRecording(t)
	var inner trace.SpanContext
	h := AsynqMiddleware(WithTracerProvider(rec.tp), WithMeterProvider(rec.mp))(
		asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			inner = trace.SpanContextFromContext(ctx)
			return context.DeadlineExceeded
		}))
	err := h.ProcessTask(context.Background(), asynq.NewTask("t", nil))
	require.ErrorIs(t, err, context.DeadlineExceeded)

	spans := rec.spans.Ended()
	require.Len(t, spans, 1)
	assert.True(t, inner.IsValid())
	assert.False(t, spans[0].Parent().IsValid(), "a root span")
	assert.Equal(t, "process", spans[0].Name(), "no queue in a context asynq did not make")
	assert.Equal(t, "deadline_exceeded", attrOf(spans[0], "error.type").AsString())
}

func TestErrorType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{errors.New("plain"), "_OTHER"},
		{fmt.Errorf("wrapped: %w", reasonError{"oom"}), "oom"},
		{fmt.Errorf("w: %w", context.Canceled), "canceled"},
		{panicError{"x"}, "panic"},
		{&asynqTestError{}, "*telemetry.asynqTestError"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, errorType(tt.err), tt.err.Error())
	}
}

type asynqTestError struct{}

func (*asynqTestError) Error() string { return "typed" }
