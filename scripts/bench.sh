#!/usr/bin/env bash
# bench.sh: `make bench`: run `echo hi` side by side through the host, Paddock's
# sandbox, docker exec, docker run and the raw engine API, print the table,
# write bench/out/latest.json and bench/out/latency.svg (and latency.png when
# rsvg-convert is available). Method and reading guide: docs/benchmarks.md.
#
#   scripts/bench.sh [paddock-bench flags…]    e.g. -n 50 -rounds 5, -only host,paddock
#
# `make bench` builds bin/paddock and bin/paddock-init first; this script
# builds bin/paddock-bench. A full run takes about 3-4 minutes on 2 cores.
#
# Environment:
#   BENCH_OUT   output directory (default bench/out)
#   BENCH_E2E   0 skips the e2e_idle scenario (idle fleet, submit → result)
#   BENCH_FAIR  0 skips the fair_share scenario (tenant b's latency behind
#               tenant a's 10,000 queued jobs, with and without --slots)
#   BENCH_RSS   0 skips the worker_rss scenario (one worker's RSS while 16
#               jobs each print 1 GiB, streamed and kept; ~40 GiB of free disk)
#   BENCH_CP    0 skips control_plane (no-op executor throughput, CPU profiles)
#   BENCH_NB    0 skips neighbours (a control job's p99 next to four chaos jobs)
#   BENCH_CRASH 0 skips crash_recovery (kill -9 of a worker → the re-run)
#
# Every scenario writes OUT/<scenario>.json; the last step merges them into
# OUT/latest.json, prints every target with pass/miss and draws
# OUT/targets.svg (paddock-bench -merge).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="/usr/local/go/bin:${PATH}"

out="${BENCH_OUT:-bench/out}"
log() { printf 'bench: %s\n' "$*"; }

if [[ ! -x bin/paddock-init ]]; then
	log "bin/paddock-init missing: building it (make build does this)"
	mkdir -p bin
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/paddock-init ./cmd/paddock-init
fi
go build -trimpath -o bin/paddock-bench ./cmd/paddock-bench
mkdir -p "${out}"
bin/paddock-bench -init bin/paddock-init -out "${out}" "$@"

# The PNG is a convenience; the SVG is the plot. Install librsvg2-bin when we
# may (root on Debian), and never fail the benchmark over it.
if ! command -v rsvg-convert >/dev/null && [[ ${EUID} -eq 0 ]] && command -v apt-get >/dev/null; then
	log "installing librsvg2-bin for the PNG rendering"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends librsvg2-bin >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends librsvg2-bin >/dev/null 2>&1; } ||
		log "could not install librsvg2-bin: SVG only"
fi
if command -v rsvg-convert >/dev/null; then
	rsvg-convert -b white -o "${out}/latency.png" "${out}/latency.svg"
	log "wrote ${out}/latency.png"
fi

# e2e_idle: NATS submit → result for `echo hi` on an idle fleet (real
# scheduler and worker processes), p50/p99 at three asynq poll intervals,
# with the Redis command rate of an idle worker. BENCH_E2E=0 skips it.
if [[ "${BENCH_E2E:-1}" != 0 ]]; then
	log "e2e_idle: idle fleet, submit → result (about 2 minutes)"
	PADDOCK_E2E_IDLE=1 PADDOCK_E2E_OUT="$(realpath -m "${out}")/e2e_idle.json" \
		go test -count=1 -v -timeout 15m -run 'TestE2EIdle' ./internal/faulttest/ 2>&1 | grep -E '^ *\|.*\|$|: p50|PASS|FAIL|ok' || true
	[[ -f "${out}/e2e_idle.json" ]] && log "wrote ${out}/e2e_idle.json"
fi

# fair_share: tenant b's `echo hi` while tenant a holds 10,000 queued jobs,
# with the scheduler's slots (fair share) and without (one FIFO queue).
if [[ "${BENCH_FAIR:-1}" != 0 ]]; then
	log "fair_share: b's latency behind a's 10,000 queued jobs (about 2 minutes)"
	PADDOCK_FAIR_SHARE=1 PADDOCK_FAIR_OUT="$(realpath -m "${out}")/fair_share.json" \
		go test -count=1 -v -timeout 20m -run 'TestFairShareBench' ./internal/faulttest/ 2>&1 | grep -E 'slots [a-z0-9]+:|PASS|FAIL|ok' || true
	[[ -f "${out}/fair_share.json" ]] && log "wrote ${out}/fair_share.json"
fi

# worker_rss: one worker process (--concurrency 16) while 16 jobs each print
# 1 GiB at once, output streamed only, then also kept in the Object Store;
# its VmRSS every 100 ms and VmHWM, against a naive in-memory capture of one
# such job. Needs ~16 GiB free in TMPDIR (deleted after). BENCH_RSS=0 skips.
if [[ "${BENCH_RSS:-1}" != 0 ]]; then
	log "worker_rss: 16 jobs × 1 GiB of output through one worker (about 8 minutes)"
	PADDOCK_WORKER_RSS=1 PADDOCK_WORKER_RSS_OUT="$(realpath -m "${out}")/worker_rss.json" \
		go test -count=1 -v -timeout 30m -run 'TestWorkerRSS' ./internal/faulttest/ 2>&1 |
		grep -E '^ *\|.*\|$|worker max RSS|(stream|keep): |naive capture|kept:|PASS|FAIL|ok' || true
	[[ -f "${out}/worker_rss.json" ]] && log "wrote ${out}/worker_rss.json"
fi

# control_plane: jobs/s through NATS → scheduler → asynq → worker → result
# with the worker's bench-only no-op executor (no Docker), against the test
# Redis (appendfsync always) and with appendfsync everysec; after each round,
# asynq_raw: asynq alone (no-op tasks) on the same Redis and settings
# (OUT/asynq_raw.json), the base of the control-plane targets; CPU profiles
# in OUT/control_plane.cpu.*.pprof.
if [[ "${BENCH_CP:-1}" != 0 ]]; then
	log "control_plane: no-op executor throughput, and asynq_raw beside it (about 4 minutes)"
	PADDOCK_CONTROL_PLANE=1 PADDOCK_CONTROL_PLANE_OUT="$(realpath -m "${out}")/control_plane.json" \
		PADDOCK_CP_VARIANTS="${BENCH_CP_VARIANTS:-default:;everysec:@appendfsync=everysec}" \
		go test -count=1 -v -timeout 10m -run 'TestControlPlane' ./internal/faulttest/ 2>&1 | grep -E '^ *\|.*\|$|jobs/s|PASS|FAIL|ok' || true
fi

# neighbours: the p99 of a one-at-a-time echo hi next to a fork bomb, a
# memory bomb, a 2-CPU loop and a 1 GiB flood on the same worker, over its
# quiet p99, phases interleaved.
if [[ "${BENCH_NB:-1}" != 0 ]]; then
	log "neighbours: control job p99 under chaos (about 5 minutes)"
	PADDOCK_NEIGHBOURS=1 PADDOCK_NEIGHBOURS_OUT="$(realpath -m "${out}")/neighbours.json" \
		go test -count=1 -v -timeout 15m -run '^TestNeighbours$' ./internal/faulttest/ 2>&1 | grep -E '^ *\|.*\|$|ratio|PASS|FAIL|ok' || true
fi

# crash_recovery: kill -9 of a worker mid-job → the re-run's start on
# another worker, 5 kills.
if [[ "${BENCH_CRASH:-1}" != 0 ]]; then
	log "crash_recovery: kill -9 → re-run (about 1 minute)"
	PADDOCK_CRASH_RECOVERY=1 PADDOCK_CRASH_RECOVERY_OUT="$(realpath -m "${out}")/crash_recovery.json" \
		go test -count=1 -v -timeout 10m -run 'TestCrashRecovery$' ./internal/faulttest/ 2>&1 | grep -E '^ *\|.*\|$|rerun|PASS|FAIL|ok' || true
fi

bin/paddock-bench -merge -out "${out}"
if command -v rsvg-convert >/dev/null; then
	rsvg-convert -b white -o "${out}/targets.png" "${out}/targets.svg"
fi
log "wrote ${out}/latest.json (every scenario) and ${out}/targets.svg"
