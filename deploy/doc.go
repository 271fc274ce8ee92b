// Package deploy holds no code: it is Paddock's deployment material and the
// tests that keep it honest.
//
//	nats/, redis/     offline image recipes of the shared services
//	                  (scripts/build-images.sh nats redis)
//	images/           the paddock and sandbox image recipes
//	k8s/              kustomize base, deps (NATS, Redis), engine and KEDA
//	                  components, overlays (dind, host-socket, sysbox)
//	ha/               the HA compose topology's scripts and NATS cluster config
//	../docker-compose.yml     the one-host fleet
//	../docker-compose.ha.yml  its HA override: 3 NATS nodes (R3), Redis
//	                          primary + replica + 3 Sentinels
//
// manifests_test.go decodes every Kubernetes manifest strictly into its
// typed API object (an unknown or misspelled field fails), builds every
// overlay with `kubectl kustomize` and checks how the parts fit (probes on
// the metrics port, grace periods above the drain, PDB and Service
// selectors, KEDA triggers on real asynq keys, every PADDOCK_* variable a
// real flag). auth_test.go checks the credentials: NATS and Redis read the
// Secret paddock-auth (made from `paddock auth init`), schedulers and
// workers a private copy of it, every KEDA redis trigger authenticates,
// NetworkPolicies let only schedulers and workers reach Redis, and no file
// holds a password, a seed or a JWT. compose_test.go brings the compose
// fleet up on the local Docker engine, checks that NATS and Redis refuse
// clients without credentials, runs jobs through it as the dev tenant and
// takes it down; `go test ./deploy/` runs a short version, `make
// test-compose` (which `make test` runs after the Go suite) the 200-job run
// with a worker killed mid-run. compose_ha_test.go (`make test-compose-ha`)
// runs the HA override the same way and kills the jobs stream's NATS leader
// and the Redis primary during the batch. docs/operations.md explains the
// choices.
package deploy
