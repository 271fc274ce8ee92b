// Package propagate carries trace context between Paddock's processes:
// the W3C tracecontext + baggage propagator they agree on, and carriers
// for NATS message headers and asynq task headers.
//
// It depends on nats.go and OpenTelemetry's API only, so that the client
// SDK imports it without the server's telemetry stack (SDK, exporters,
// Prometheus, gRPC); package telemetry builds on it.
package propagate

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// w3c is the wire format of trace context between Paddock processes. It is
// fixed rather than taken from the global propagator: the client, scheduler
// and worker must agree on it whether or not a process installed globals.
var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Propagator returns the W3C tracecontext + baggage propagator used by the
// Inject/Extract helpers and, by default, by telemetry.AsynqMiddleware.
func Propagator() propagation.TextMapPropagator { return w3c }

// NATSHeaderCarrier adapts a nats.Header to propagation.TextMapCarrier.
//
// nats.Header is case-sensitive and does not canonicalize keys (unlike
// net/http), so Set writes the exact keys the propagator gives
// ("traceparent", "tracestate", "baggage"). Get tries the exact key first and
// then a case-insensitive match, so a header written by a client that
// canonicalized ("Traceparent") is still read.
type NATSHeaderCarrier nats.Header

var _ propagation.TextMapCarrier = NATSHeaderCarrier(nil)

// Get returns the first value for key.
func (c NATSHeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set replaces the values for key. It does nothing on a nil header.
func (c NATSHeaderCarrier) Set(key, value string) {
	if c != nil {
		c[key] = []string{value}
	}
}

// Keys lists the header keys.
func (c NATSHeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// HeaderMapCarrier adapts a map[string]string (asynq task headers:
// asynq.NewTaskWithHeaders, (*asynq.Task).Headers) to
// propagation.TextMapCarrier. Like [NATSHeaderCarrier], Set uses the exact
// key and Get falls back to a case-insensitive match.
type HeaderMapCarrier map[string]string

var _ propagation.TextMapCarrier = HeaderMapCarrier(nil)

// Get returns the value for key.
func (c HeaderMapCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

// Set sets key to value. It does nothing on a nil map.
func (c HeaderMapCarrier) Set(key, value string) {
	if c != nil {
		c[key] = value
	}
}

// Keys lists the map's keys.
func (c HeaderMapCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectNATS writes ctx's trace context and baggage into h. h must be
// non-nil (nats.NewMsg makes one); a nil h is left alone.
func InjectNATS(ctx context.Context, h nats.Header) {
	w3c.Inject(ctx, NATSHeaderCarrier(h))
}

// ExtractNATS returns ctx carrying the remote span context and baggage found
// in h. Without trace headers ctx is returned unchanged.
func ExtractNATS(ctx context.Context, h nats.Header) context.Context {
	return w3c.Extract(ctx, NATSHeaderCarrier(h))
}

// InjectMap writes ctx's trace context and baggage into m (asynq task
// headers). m must be non-nil; a nil m is left alone.
func InjectMap(ctx context.Context, m map[string]string) {
	w3c.Inject(ctx, HeaderMapCarrier(m))
}

// ExtractMap returns ctx carrying the remote span context and baggage found
// in m.
func ExtractMap(ctx context.Context, m map[string]string) context.Context {
	return w3c.Extract(ctx, HeaderMapCarrier(m))
}

// TraceParent returns the W3C traceparent of ctx's span
// ("00-<trace-id>-<span-id>-<flags>"), to pass into a container as
// TRACEPARENT, or "" when ctx carries no valid span context.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := HeaderMapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
