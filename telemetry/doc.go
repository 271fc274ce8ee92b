// Package telemetry sets up Paddock's traces and metrics and carries trace
// context between processes.
//
// One trace per job runs from the client's submit through the scheduler and
// the asynq queue to every attempt in the container (docs/telemetry.md):
//
//   - [Setup] builds a TracerProvider and a MeterProvider from the standard
//     OTEL_* environment, always attaches a Prometheus reader served by
//     [Provider.MetricsHandler], and optionally appends every span to a local
//     JSONL file ([Config.SpanFile]) that [ReadSpans] and [RenderTree] turn
//     into the tree `paddock trace ID` prints; [SpanTail] reads one job's
//     traces from the file's bounded tail, for the dashboard's trace view.
//   - [InjectNATS]/[ExtractNATS] and [InjectMap]/[ExtractMap] move W3C trace
//     context through NATS message headers and asynq task headers;
//     [TraceParent] gives the value to hand a container as TRACEPARENT.
//   - [AsynqMiddleware] starts one consumer span per task, following the
//     OpenTelemetry messaging conventions, and records its duration.
//   - [Metrics] holds Paddock's own instruments (jobs, queue wait, pool,
//     heal loop, leases, reaper, submissions); [RegisterQueueGauges] exposes
//     asynq queue depth and latency.
//
// Nothing here imports another Paddock package: the attribute keys
// ([AttrJobID], [AttrReason], ...) are the shared vocabulary, and callers pass
// plain strings.
//
// With no OTEL_* variables set nothing is exported and nothing is logged:
// spans still get real trace and span ids (so ids in logs and results match
// across processes), and metrics are only kept for the Prometheus handler.
// See docs/telemetry.md for the environment variables and metric names.
package telemetry
