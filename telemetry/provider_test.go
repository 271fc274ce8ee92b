package telemetry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
)

// captureOutput redirects os.Stdout and os.Stderr while fn runs and returns
// what was written to them.
func captureOutput(t *testing.T, fn func()) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = f, f
	defer func() { os.Stdout, os.Stderr = stdout, stderr }()
	fn()
	require.NoError(t, f.Close())
	out, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	return string(out)
}

func TestSetupQuietWithoutEnv(t *testing.T) {
	clearOTelEnv(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))

	out := captureOutput(t, func() {
		ctx := context.Background()
		p, err := Setup(ctx, Config{ServiceName: "quiet", Logger: logger})
		require.NoError(t, err)
		_, span := p.TracerProvider().Tracer("test").Start(ctx, "work")
		assert.True(t, span.SpanContext().IsValid(), "real ids without exporters")
		span.End()
		require.NoError(t, p.ForceFlush(ctx))
		require.NoError(t, p.Shutdown(ctx))
		require.NoError(t, p.Shutdown(ctx), "idempotent")
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		require.NoError(t, p.Shutdown(canceled), "idempotent, even canceled")
	})
	assert.Empty(t, out)
	assert.Empty(t, logs.String())
}

func TestSetupResourceFromEnv(t *testing.T) {
	clearOTelEnv(t)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test,service.name=from-attrs")
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	res, err := newResource(context.Background(), Config{ServiceName: "from-config", ServiceVersion: "1.2.3"}.withDefaults())
	require.NoError(t, err)
	get := func(k attribute.Key) string { v, _ := res.Set().Value(k); return v.AsString() }
	assert.Equal(t, "from-env", get("service.name"))
	assert.Equal(t, "1.2.3", get("service.version"))
	assert.Equal(t, "test", get("deployment.environment.name"))

	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	res, err = newResource(context.Background(), Config{}.withDefaults())
	require.NoError(t, err)
	assert.Equal(t, DefaultServiceName, get("service.name"))
	assert.NotEmpty(t, get("host.name"))
}

func TestSetupSamplerFromEnv(t *testing.T) {
	clearOTelEnv(t)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	ctx := context.Background()
	p, err := Setup(ctx, Config{})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Shutdown(ctx)) }()
	_, span := p.TracerProvider().Tracer("test").Start(ctx, "dropped")
	defer span.End()
	assert.False(t, span.SpanContext().IsSampled())
}

func TestEnvExporterName(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    string
		wantErr bool
	}{
		{name: "unset is none", want: "none"},
		{name: "unset with endpoint is otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, want: "otlp"},
		{name: "unset with signal endpoint is otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: "otlp"},
		{name: "explicit", env: map[string]string{"OTEL_TRACES_EXPORTER": " console "}, want: "console"},
		{name: "explicit none beats endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: "none"},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: "none"},
		{name: "several", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearOTelEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := envExporterName("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
			if tt.wantErr {
				assert.ErrorIs(t, err, ErrInvalidConfig)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSetupInvalidEnv(t *testing.T) {
	for _, kv := range [][2]string{
		{"OTEL_TRACES_EXPORTER", "bogus"},
		{"OTEL_METRICS_EXPORTER", "bogus"},
		{"OTEL_RESOURCE_ATTRIBUTES", "no-equals-sign"},
	} {
		t.Run(kv[0], func(t *testing.T) {
			clearOTelEnv(t)
			t.Setenv(kv[0], kv[1])
			p, err := Setup(context.Background(), Config{})
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, p)
		})
	}
}

// TestSetupOTLPFromEnv builds real OTLP exporters (nothing listens; no span
// is recorded, so nothing is sent) and the "prometheus" metrics value.
func TestSetupOTLPFromEnv(t *testing.T) {
	clearOTelEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_METRICS_EXPORTER", "prometheus")
	ctx := context.Background()
	p, err := Setup(ctx, Config{})
	require.NoError(t, err)
	require.NoError(t, p.Shutdown(ctx))

	tracesName, exp, err := envSpanExporter(ctx)
	require.NoError(t, err)
	assert.Equal(t, "otlp", tracesName)
	require.NotNil(t, exp)
	require.NoError(t, exp.Shutdown(ctx))
	metricsName, reader, err := envMetricReader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "prometheus", metricsName)
	assert.Nil(t, reader, "served by MetricsHandler, no second server")
}

func TestSetupSetGlobal(t *testing.T) {
	clearOTelEnv(t)
	tp, mp, prop, eh := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator(), otel.GetErrorHandler()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetMeterProvider(mp)
		otel.SetTextMapPropagator(prop)
		otel.SetErrorHandler(eh)
	})
	var logs bytes.Buffer
	ctx := context.Background()
	p, err := Setup(ctx, Config{SetGlobal: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Shutdown(ctx)) }()

	assert.Same(t, p.TracerProvider(), otel.GetTracerProvider())
	assert.Same(t, p.MeterProvider(), otel.GetMeterProvider())
	assert.ElementsMatch(t, []string{"traceparent", "tracestate", "baggage"}, otel.GetTextMapPropagator().Fields())
	otel.Handle(errors.New("export failed"))
	otel.Handle(errors.New("export failed again"))
	assert.Contains(t, logs.String(), "export failed")
	assert.NotContains(t, logs.String(), "again", "rate-limited")
	assert.Contains(t, logs.String(), "component=telemetry")
}

func TestErrorLoggerRateLimit(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h := &errorLogger{logger: slog.New(slog.NewTextHandler(&logs, nil)), every: 20 * time.Millisecond}
	h.Handle(errors.New("first"))
	for range 5 {
		h.Handle(errors.New("dropped"))
	}
	h.mu.Lock()
	h.last = h.last.Add(-h.every) // the interval has passed since "first"
	h.mu.Unlock()
	h.Handle(errors.New("later"))
	assert.Contains(t, logs.String(), "first")
	assert.NotContains(t, logs.String(), "dropped")
	assert.Contains(t, logs.String(), "later")
	assert.Contains(t, logs.String(), "suppressed=5")
}

// TestProviderStartStop sets up and shuts down repeatedly with every local
// exporter on; goleak (TestMain) catches a leaked batcher.
func TestProviderStartStop(t *testing.T) {
	clearOTelEnv(t)
	path := t.TempDir() + "/spans.jsonl"
	ctx := context.Background()
	for range 5 {
		p, err := Setup(ctx, Config{SpanFile: path, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		_, span := p.TracerProvider().Tracer("test").Start(ctx, "x")
		span.End()
		require.NoError(t, p.Shutdown(ctx))
	}
	spans, err := ReadSpans(path, "")
	require.NoError(t, err)
	assert.Len(t, spans, 5)
}
