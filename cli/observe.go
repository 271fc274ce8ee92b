package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/telemetry"
)

// obsFlags configure telemetry and the health/metrics endpoint.
type obsFlags struct {
	metricsAddr string
	spanFile    string
}

func (o *obsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9464); empty disables")
	fs.StringVar(&o.spanFile, "span-file", "", "also write every span as a JSON line to this `file` (read it with 'paddock trace ID')")
}

// observability is one service's telemetry.
type observability struct {
	provider *telemetry.Provider
	metrics  *telemetry.Metrics
	endpoint *telemetry.Endpoint
	log      *slog.Logger
}

// startObservability sets up OpenTelemetry from OTEL_* (quiet when unset),
// the metrics instruments, and the optional HTTP endpoint. ready is called
// by /readyz.
func startObservability(ctx context.Context, g *globals, o *obsFlags, service string, ready func(context.Context) error) (*observability, error) {
	log := g.logger
	if o.spanFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.spanFile), 0o700); err != nil {
			return nil, err
		}
	}
	p, err := telemetry.Setup(ctx, g.telemetryConfig(service, o.spanFile, true))
	if err != nil {
		return nil, err
	}
	m, err := telemetry.NewMetrics(p.MeterProvider().Meter("github.com/paddockhq/paddock"))
	if err != nil {
		_ = p.Shutdown(ctx)
		return nil, err
	}
	obs := &observability{provider: p, metrics: m, log: log}
	if o.metricsAddr != "" {
		if obs.endpoint, err = telemetry.ServeEndpoint(o.metricsAddr, p.MetricsHandler(), ready, log); err != nil {
			_ = p.Shutdown(ctx)
			return nil, fmt.Errorf("--metrics-addr %s: %w", o.metricsAddr, err)
		}
	}
	return obs, nil
}

// telemetryConfig is the telemetry of one service of this binary:
// service.version is the build's (version.go).
func (g *globals) telemetryConfig(service, spanFile string, global bool) telemetry.Config {
	return telemetry.Config{ServiceName: service, ServiceVersion: g.version.String(), Logger: g.logger,
		SpanFile: spanFile, SetGlobal: global}
}

// stop flushes telemetry last: it records the shutdown of everything else.
func (o *observability) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if o.endpoint != nil {
		_ = o.endpoint.Shutdown(ctx)
	}
	if err := o.provider.Shutdown(ctx); err != nil {
		o.log.Warn("telemetry shutdown", "err", err)
	}
}

func traceCmd(g *globals) *cobra.Command {
	var spanFile, output string
	cmd := &cobra.Command{
		Use:   "trace ID",
		Short: "Print a job's span tree with durations from a span file (no tracing backend needed)",
		Long: `trace reads the JSON-lines span file that 'paddock up' writes (or any service
started with --span-file) and prints the spans of one job (by job id or trace
id) as a tree: submit, schedule, queue, lock wait, sandbox acquire, attempts;
with -o json, one span record per line as the file holds them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if spanFile == "" {
				spanFile = filepath.Join(g.dataDirPath(), "spans.jsonl")
			}
			spans, err := telemetry.ReadSpans(spanFile, args[0])
			if err != nil {
				return fmt.Errorf("read spans from %s: %w (services write it with --span-file; `paddock up` writes <data-dir>/spans.jsonl)", spanFile, err)
			}
			if len(spans) == 0 {
				return fmt.Errorf("no spans for %s in %s (spans reach the file within about a second of the job's end)", args[0], spanFile)
			}
			if output == "json" {
				return printJSONL(g.stdout, spans)
			}
			return telemetry.RenderTree(g.stdout, spans)
		},
	}
	cmd.Flags().StringVar(&spanFile, "span-file", "", "span `file` (default <data-dir>/spans.jsonl of 'paddock up')")
	addOutputFlag(cmd, &output)
	return cmd
}
