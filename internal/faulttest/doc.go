// Package faulttest holds Paddock's fault tests: whole fleets of real
// `paddock scheduler` and `paddock worker` processes (built once by
// TestMain) on a private redis-server, an embedded NATS server and the local
// Docker engine, killed, drained and cut off from their services while they
// run jobs. It has no non-test code; see docs/reliability.md for what each
// test proves and how long it takes.
package faulttest
