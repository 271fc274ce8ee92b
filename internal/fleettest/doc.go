// Package fleettest is the multi-host fleet harness (`make test-fleet`,
// docs/reliability.md "Fleet harness"): a fleet of separate hosts on this
// machine, each a network namespace with its own address on a bridge, and
// faults injected while a batch of jobs runs.
//
// Topology (net.go, services.go): a hub namespace holds the bridge; every
// host namespace has one veth on it; the test process reaches the bridge
// through one veth of its own (pdk-<run>-r). Three NATS JetStream nodes in
// a cluster (a nats-server binary built from the module cache), a Redis
// primary, a replica and three Sentinels, two `paddock scheduler` hosts
// and three `paddock worker` hosts, each worker on the machine's Docker
// engine over /var/run/docker.sock (a unix socket crosses namespaces; the
// boxes have no network). No host has a default route: traffic stays on
// the bridge.
//
// Every name the harness creates starts with pdk-<run id>; a run notes its
// pid in /run/paddock-fleet/<run>.pid, and the next run removes whatever a
// run whose pid is gone left behind (namespaces, processes, the root veth,
// containers of its workers).
//
// The test runs only with PADDOCK_FLEET=full (make test-fleet, ≥5,000
// jobs, every fault) or PADDOCK_FLEET=short (a few hundred jobs, a subset
// of the faults), as root with ip(8) and iptables(8); otherwise it skips
// and says why.
package fleettest
