package scheduler

import "github.com/nats-io/nats.go"

// natsCarrier reads and writes trace context in NATS headers with the exact
// keys the propagator uses ("traceparent", "tracestate"): nats.Header does
// not canonicalize, unlike propagation.HeaderCarrier.
type natsCarrier nats.Header

func (c natsCarrier) Get(key string) string { return nats.Header(c).Get(key) }

func (c natsCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

func (c natsCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
