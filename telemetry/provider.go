package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ErrInvalidConfig is wrapped by every error Setup returns for a bad Config
// or a bad OTEL_* value.
var ErrInvalidConfig = errors.New("telemetry: invalid config")

// Defaults filled in by Setup.
const (
	DefaultServiceName = "paddock"
	// DefaultShutdownTimeout bounds Shutdown and ForceFlush when the caller's
	// context has no deadline.
	DefaultShutdownTimeout = 10 * time.Second
	// spanFileBatchTimeout is how long a span may wait before it is appended
	// to Config.SpanFile.
	spanFileBatchTimeout = time.Second
	// errorLogEvery rate-limits the OpenTelemetry error handler Setup installs.
	errorLogEvery = 30 * time.Second
)

// Config configures Setup. A zero field means "default".
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME (or service.name in
	// OTEL_RESOURCE_ATTRIBUTES) overrides it. Default "paddock".
	ServiceName string
	// ServiceVersion is service.version, if set.
	ServiceVersion string
	// Logger receives the few messages telemetry itself emits (what was set
	// up, rate-limited export errors). Default slog.Default().
	Logger *slog.Logger
	// SpanFile, if set, appends every finished span as one JSON line to this
	// file (created 0600, parent directories 0750). Several processes may
	// share the file. Read it with ReadSpans.
	SpanFile string
	// SetGlobal installs the providers, the W3C propagator and a rate-limited
	// slog error handler as the otel globals. Only the binary's main should
	// set it; libraries and tests take the Provider explicitly.
	SetGlobal bool
}

// Provider owns the tracer and meter providers built by Setup.
type Provider struct {
	tp      *sdktrace.TracerProvider
	mp      *sdkmetric.MeterProvider
	metrics http.Handler
	logger  *slog.Logger

	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds the tracer and meter providers.
//
// Traces go to the exporter named by OTEL_TRACES_EXPORTER (otlp, console,
// none; through contrib autoexport, so OTEL_EXPORTER_OTLP_* apply) and,
// when cfg.SpanFile is set, to that file. Unlike autoexport, an unset
// OTEL_TRACES_EXPORTER means "none" unless an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set: a process started without telemetry configuration never tries to
// reach localhost:4318 and never logs export errors. OTEL_METRICS_EXPORTER
// is read the same way; its "prometheus" value selects nothing extra, since
// metrics are always served by MetricsHandler. OTEL_SDK_DISABLED=true turns
// both env exporters off. The sampler comes from OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on), the resource from
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
//
// The caller must call Shutdown.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	logger := cfg.Logger.With("component", "telemetry")

	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}

	// Everything built below is released by cleanup if a later step fails.
	var closers []func(context.Context) error
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultShutdownTimeout)
		defer cancel()
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i](cctx)
		}
	}

	traceOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	tracesName, spanExp, err := envSpanExporter(ctx)
	if err != nil {
		return nil, err
	}
	if spanExp != nil {
		closers = append(closers, spanExp.Shutdown)
		traceOpts = append(traceOpts, sdktrace.WithBatcher(spanExp))
	}
	if cfg.SpanFile != "" {
		fileExp, err := newFileExporter(cfg.SpanFile)
		if err != nil {
			cleanup()
			return nil, err
		}
		closers = append(closers, fileExp.Shutdown)
		traceOpts = append(traceOpts, sdktrace.WithBatcher(fileExp, sdktrace.WithBatchTimeout(spanFileBatchTimeout)))
	}

	reg, promReader, err := newPromReader()
	if err != nil {
		cleanup()
		return nil, err
	}
	closers = append(closers, promReader.Shutdown)
	meterOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promReader)}
	metricsName, envReader, err := envMetricReader(ctx)
	if err != nil {
		cleanup()
		return nil, err
	}
	if envReader != nil {
		closers = append(closers, envReader.Shutdown)
		meterOpts = append(meterOpts, sdkmetric.WithReader(envReader))
	}

	p := &Provider{
		tp:     sdktrace.NewTracerProvider(traceOpts...),
		mp:     sdkmetric.NewMeterProvider(meterOpts...),
		logger: logger,
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			ErrorLog:      promLogger{logger},
			ErrorHandling: promhttp.ContinueOnError,
			Registry:      reg,
		}),
	}
	if cfg.SetGlobal {
		otel.SetErrorHandler(&errorLogger{logger: logger, every: errorLogEvery})
		otel.SetTracerProvider(p.tp)
		otel.SetMeterProvider(p.mp)
		otel.SetTextMapPropagator(w3c)
	}
	logger.Debug("telemetry ready", "traces", tracesName, "metrics", metricsName,
		"span_file", cfg.SpanFile, "global", cfg.SetGlobal)
	return p, nil
}

// newPromReader returns the registry MetricsHandler serves, holding the Go
// runtime and process collectors, and the reader that exports the
// MeterProvider's metrics into it.
func newPromReader() (*prometheus.Registry, *promexporter.Exporter, error) {
	reg := prometheus.NewRegistry()
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	); err != nil {
		return nil, nil, fmt.Errorf("telemetry: prometheus collectors: %w", err)
	}
	promReader, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	return reg, promReader, nil
}

func (c Config) withDefaults() Config {
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// newResource describes this process. Later sources win: cfg, then the
// OTEL_* environment.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := []resource.Option{
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)),
	}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(cfg.ServiceVersion)))
	}
	attrs = append(attrs, resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	res, err := resource.New(ctx, attrs...)
	if err != nil {
		return nil, fmt.Errorf("%w: resource (OTEL_RESOURCE_ATTRIBUTES?): %w", ErrInvalidConfig, err)
	}
	return res, nil
}

// envSpanExporter returns the exporter OTEL_TRACES_EXPORTER selects, or nil
// for none. See Setup for how unset differs from autoexport.
func envSpanExporter(ctx context.Context) (string, sdktrace.SpanExporter, error) {
	name, err := envExporterName("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if err != nil || name == "none" {
		return name, nil, err
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return name, nil, fmt.Errorf("%w: traces exporter %q: %w", ErrInvalidConfig, name, err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return "none", nil, nil
	}
	return name, exp, nil
}

// envMetricReader returns the reader OTEL_METRICS_EXPORTER selects, or nil
// for none or prometheus (MetricsHandler already serves Prometheus; a second
// server from autoexport would collide on its fixed port when several
// workers share a host).
func envMetricReader(ctx context.Context) (string, sdkmetric.Reader, error) {
	name, err := envExporterName("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
	if err != nil || name == "none" || name == "prometheus" {
		return name, nil, err
	}
	r, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		return name, nil, fmt.Errorf("%w: metrics exporter %q: %w", ErrInvalidConfig, name, err)
	}
	if autoexport.IsNoneMetricReader(r) {
		return "none", nil, nil
	}
	return name, r, nil
}

// envExporterName reads an OTEL_*_EXPORTER variable: unset means "otlp" when
// an OTLP endpoint is configured and "none" otherwise.
func envExporterName(key, signalEndpointKey string) (string, error) {
	if disabled, _ := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); disabled {
		return "none", nil
	}
	name := strings.TrimSpace(os.Getenv(key))
	switch {
	case strings.Contains(name, ","):
		return "", fmt.Errorf("%w: %s=%q: only one exporter is supported", ErrInvalidConfig, key, name)
	case name != "":
		return name, nil
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv(signalEndpointKey) != "":
		return "otlp", nil
	default:
		return "none", nil
	}
}

// TracerProvider returns the tracer provider.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// MeterProvider returns the meter provider.
func (p *Provider) MeterProvider() metric.MeterProvider { return p.mp }

// MetricsHandler serves every metric of the MeterProvider, plus Go runtime
// and process metrics, in the Prometheus exposition format. Mount it on
// /metrics. It uses its own registry, not prometheus.DefaultRegisterer.
func (p *Provider) MetricsHandler() http.Handler { return p.metrics }

// ForceFlush exports every finished span and pushes metrics to the env
// exporter now. Without a deadline on ctx it gives up after
// DefaultShutdownTimeout.
func (p *Provider) ForceFlush(ctx context.Context) error {
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	return errors.Join(p.tp.ForceFlush(ctx), p.mp.ForceFlush(ctx))
}

// Shutdown flushes and stops every exporter, traces first (the last spans
// must not wait on metrics), then metrics, then closes the span file. It is
// idempotent: later calls return the first call's result. A canceled ctx
// without a deadline still gets DefaultShutdownTimeout to flush.
func (p *Provider) Shutdown(ctx context.Context) error {
	p.shutdownOnce.Do(func() {
		ctx, cancel := withDefaultDeadline(ctx)
		defer cancel()
		p.shutdownErr = errors.Join(p.tp.Shutdown(ctx), p.mp.Shutdown(ctx))
	})
	return p.shutdownErr
}

// withDefaultDeadline detaches ctx from cancellation and bounds it with
// DefaultShutdownTimeout unless the caller set a deadline.
func withDefaultDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), DefaultShutdownTimeout)
}

// errorLogger is the otel error handler: export failures repeat on every
// batch, so it logs at most one every interval and counts the rest.
type errorLogger struct {
	logger *slog.Logger
	every  time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (h *errorLogger) Handle(err error) {
	h.mu.Lock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < h.every {
		h.suppressed++
		h.mu.Unlock()
		return
	}
	suppressed := h.suppressed
	h.last, h.suppressed = now, 0
	h.mu.Unlock()
	h.logger.Warn("opentelemetry error", "err", err, "suppressed", suppressed)
}

// promLogger adapts slog to promhttp.Logger.
type promLogger struct{ logger *slog.Logger }

func (l promLogger) Println(v ...any) { l.logger.Warn("metrics scrape: " + fmt.Sprint(v...)) }
