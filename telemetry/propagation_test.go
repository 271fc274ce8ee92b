package telemetry

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// assertContinues checks that child is a remote-parented continuation of parent.
func assertContinues(t *testing.T, parent trace.Span, child sdktrace.ReadOnlySpan) {
	t.Helper()
	assert.Equal(t, parent.SpanContext().TraceID(), child.SpanContext().TraceID(), "same trace")
	assert.Equal(t, parent.SpanContext().SpanID(), child.Parent().SpanID(), "parent span")
	assert.True(t, child.Parent().IsRemote(), "parent arrived over the wire")
}

func withBaggage(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	m, err := baggage.NewMember("paddock.pipeline", "p1")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	return baggage.ContextWithBaggage(ctx, b)
}

func TestNATSHeaderRoundTrip(t *testing.T) {
	t.Parallel()
	rec := newRecording(t)
	tracer := rec.tp.Tracer("test")

	ctx, parent := tracer.Start(withBaggage(t, context.Background()), "publish", trace.WithSpanKind(trace.SpanKindProducer))
	h := nats.Header{}
	InjectNATS(ctx, h)
	parent.End()

	assert.Contains(t, h, "traceparent", "exact lowercase key")
	assert.NotContains(t, h, "Traceparent")
	assert.Equal(t, TraceParent(ctx), h.Get("traceparent"))

	rctx := ExtractNATS(context.Background(), h)
	assert.Equal(t, "p1", baggage.FromContext(rctx).Member("paddock.pipeline").Value())
	_, child := tracer.Start(rctx, "process", trace.WithSpanKind(trace.SpanKindConsumer))
	child.End()
	assertContinues(t, parent, child.(sdktrace.ReadOnlySpan))
}

// TestNATSHeaderOverServer sends the headers through a real NATS server: the
// keys must arrive as written.
func TestNATSHeaderOverServer(t *testing.T) {
	t.Parallel()
	srv := testsvc.StartNATS(t)
	nc, err := nats.Connect(srv.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	rec := newRecording(t)
	tracer := rec.tp.Tracer("test")

	sub, err := nc.SubscribeSync("paddock.test")
	require.NoError(t, err)
	ctx, parent := tracer.Start(context.Background(), "publish paddock.test")
	msg := nats.NewMsg("paddock.test")
	InjectNATS(ctx, msg.Header)
	require.NoError(t, nc.PublishMsg(msg))
	parent.End()

	got, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Contains(t, got.Header, "traceparent")
	_, child := tracer.Start(ExtractNATS(context.Background(), got.Header), "process paddock.test")
	child.End()
	assertContinues(t, parent, child.(sdktrace.ReadOnlySpan))
}

func TestNATSHeaderCanonicalizedKey(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := ExtractNATS(context.Background(), nats.Header{"Traceparent": {tp}})
	sc := trace.SpanContextFromContext(ctx)
	require.True(t, sc.IsValid())
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	assert.Equal(t, tp, TraceParent(ctx))
}

func TestHeaderMapRoundTrip(t *testing.T) {
	t.Parallel()
	rec := newRecording(t)
	tracer := rec.tp.Tracer("test")

	ctx, parent := tracer.Start(withBaggage(t, context.Background()), "enqueue")
	headers := map[string]string{"other": "kept"}
	InjectMap(ctx, headers)
	parent.End()
	assert.Contains(t, headers, "traceparent")
	assert.Equal(t, "kept", headers["other"])

	rctx := ExtractMap(context.Background(), headers)
	assert.Equal(t, "p1", baggage.FromContext(rctx).Member("paddock.pipeline").Value())
	_, child := tracer.Start(rctx, "process")
	child.End()
	assertContinues(t, parent, child.(sdktrace.ReadOnlySpan))
}

func TestTraceParent(t *testing.T) {
	t.Parallel()
	assert.Empty(t, TraceParent(context.Background()))

	rec := newRecording(t)
	ctx, span := rec.tp.Tracer("test").Start(context.Background(), "attempt")
	defer span.End()
	sc := span.SpanContext()
	assert.Regexp(t, regexp.MustCompile(`^00-`+sc.TraceID().String()+`-`+sc.SpanID().String()+`-01$`), TraceParent(ctx))
}

func TestInjectNilCarrier(t *testing.T) {
	t.Parallel()
	rec := newRecording(t)
	ctx, span := rec.tp.Tracer("test").Start(context.Background(), "x")
	defer span.End()
	assert.NotPanics(t, func() {
		InjectNATS(ctx, nil)
		InjectMap(ctx, nil)
		_ = ExtractNATS(ctx, nil)
		_ = ExtractMap(ctx, nil)
	})
}
