package telemetry

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/paddockhq/paddock/telemetry/propagate"
)

// The propagation of trace context lives in package propagate, which the
// client SDK imports without this package's server stack; these are its
// names here.

// w3c is propagate's propagator.
var w3c = propagate.Propagator()

// Propagator returns the W3C tracecontext + baggage propagator
// (propagate.Propagator) used by the Inject/Extract helpers and, by
// default, by [AsynqMiddleware].
func Propagator() propagation.TextMapPropagator { return w3c }

// NATSHeaderCarrier is propagate.NATSHeaderCarrier.
type NATSHeaderCarrier = propagate.NATSHeaderCarrier

// HeaderMapCarrier is propagate.HeaderMapCarrier.
type HeaderMapCarrier = propagate.HeaderMapCarrier

// InjectNATS is propagate.InjectNATS.
func InjectNATS(ctx context.Context, h nats.Header) { propagate.InjectNATS(ctx, h) }

// ExtractNATS is propagate.ExtractNATS.
func ExtractNATS(ctx context.Context, h nats.Header) context.Context {
	return propagate.ExtractNATS(ctx, h)
}

// InjectMap is propagate.InjectMap.
func InjectMap(ctx context.Context, m map[string]string) { propagate.InjectMap(ctx, m) }

// ExtractMap is propagate.ExtractMap.
func ExtractMap(ctx context.Context, m map[string]string) context.Context {
	return propagate.ExtractMap(ctx, m)
}

// TraceParent is propagate.TraceParent.
func TraceParent(ctx context.Context) string { return propagate.TraceParent(ctx) }
