// Package deploy holds no code: it is Paddock's deployment material and the
// tests that keep it honest.
//
//	nats/, redis/     offline image recipes of the shared services
//	                  (scripts/build-images.sh nats redis)
//	images/           the paddock and sandbox image recipes
//	k8s/              kustomize base, deps (NATS, Redis), engine and KEDA
//	                  components, overlays (dind, host-socket, sysbox)
//	../docker-compose.yml  the one-host fleet
//
// manifests_test.go decodes every Kubernetes manifest strictly into its
// typed API object (an unknown or misspelled field fails), builds every
// overlay with `kubectl kustomize` and checks how the parts fit (probes on
// the metrics port, grace periods above the drain, PDB and Service
// selectors, KEDA triggers on real asynq keys, every PADDOCK_* variable a
// real flag). compose_test.go brings the compose fleet up on the local
// Docker engine, runs jobs through it and takes it down; `make test` runs a
// short version, `make test-compose` the 200-job run with a worker killed
// mid-run. docs/operations.md explains the choices.
package deploy
