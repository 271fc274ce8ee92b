#!/usr/bin/env bash
# setup.sh: make this Debian 12 host ready to build and run Paddock.
#
#   scripts/setup.sh
#
# Idempotent and quick when nothing is missing (two dpkg/docker queries, well
# under a second). Run as root; `make test` and `make demo` call it first.
#
#   1. installs the Debian packages Paddock needs, running `apt-get update`
#      only when something is missing, with service starts disabled during the
#      install (no redis-server is started on :6379; the tests run a private
#      redis-server on a unix socket and `paddock up` starts its own);
#   2. starts dockerd when `docker info` fails: through systemd when systemd
#      is PID 1, otherwise in the background with its log in
#      /var/log/paddock-dockerd.log, and waits for it (60 s at most).
#
# Environment:
#   PADDOCK_DOCKERD_FLAGS   extra flags for dockerd when this script starts it,
#                           e.g. "--storage-driver=vfs" (default: none; dockerd
#                           picks overlay2 where the backing filesystem allows)
#   PADDOCK_DOCKERD_WAIT    seconds to wait for dockerd (default 60)
set -euo pipefail

readonly DOCKERD_LOG=/var/log/paddock-dockerd.log
readonly LOCK_FILE=/run/lock/paddock-setup.lock

# Packages and why:
#   docker.io       the container engine (pulls containerd, runc, iptables, tini)
#   redis-server    asynq's broker; tests and `paddock up` start their own
#   busybox-static  + bash-static: the 3 MB paddock/test image
#   mmdebstrap      builds the Debian rootfs of paddock/sandbox without a registry
#   ca-certificates apt over https mirrors, CA bundle for the paddock image
#   docker-compose  the Compose fleet test (deploy/compose_test.go) and `make compose-up`
#   cgroupfs-mount  mounts cgroups on hosts without systemd (as Debian's
#                   /etc/init.d/docker does)
#   gcc libc6-dev   cgo, which `go test -race` (make test) needs
#   curl            `make demo` calls the gateway's HTTP API with it
#   nodejs          runs the MCP Inspector CLI that cli/inspector_test.go
#                   drives against `paddock up`; its npm is installed by `make
#                   inspector` when none is on PATH (not listed here: NodeSource's
#                   nodejs bundles npm and conflicts with Debian's npm package)
#   chromium        the headless browser cli/ui_test.go drives (chromedp)
#                   against the dashboard of a real `paddock up` (make ui-test)
readonly BASE_PACKAGES=(docker.io docker-compose redis-server busybox-static bash-static mmdebstrap
	ca-certificates cgroupfs-mount gcc libc6-dev nodejs curl chromium)

# The Go toolchain is not a Debian package of the right version: it is
# checked, not installed.
readonly GO_MIN_MINOR=26

log() { printf 'setup: %s\n' "$*"; }
die() {
	printf 'setup: error: %s\n' "$*" >&2
	exit 1
}

require_root() {
	if [[ ${EUID} -ne 0 ]]; then
		die "run as root (sudo $0): it installs packages and starts dockerd"
	fi
	if [[ ! -r /etc/debian_version ]] || ! command -v apt-get >/dev/null; then
		die "this script supports Debian 12 (bookworm) only; install the packages listed in $0 by hand"
	fi
}

# Serialize concurrent runs (e.g. `make -j test demo`): apt and dockerd start-up
# are not safe to race.
take_lock() {
	mkdir -p "$(dirname "${LOCK_FILE}")"
	exec 9>"${LOCK_FILE}"
	flock 9
}

wanted_packages() {
	printf '%s\n' "${BASE_PACKAGES[@]}"
	# Docker 20.10 refuses to start containers when the kernel has AppArmor
	# enabled but apparmor_parser is missing.
	if [[ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null || true)" == Y ]]; then
		echo apparmor
	fi
}

# missing_packages prints the wanted packages that are not fully installed
# (one dpkg-query for all: this is most of the fast path's time).
missing_packages() {
	local -a wanted
	local -A installed=()
	local status pkg
	mapfile -t wanted < <(wanted_packages)
	while read -r status pkg; do
		if [[ "${status}" == ii ]]; then
			installed[${pkg%%:*}]=1
		fi
	done < <(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${wanted[@]}" 2>/dev/null || true)
	for pkg in "${wanted[@]}"; do
		if [[ -z "${installed[${pkg}]:-}" ]]; then
			echo "${pkg}"
		fi
	done
}

# Keep maintainer scripts from starting services (redis-server on :6379,
# docker) while installing: policy-rc.d exit 101 = "action forbidden".
# An existing policy-rc.d is left as it is.
POLICY_RC=/usr/sbin/policy-rc.d
POLICY_RC_OURS=0
block_service_starts() {
	if [[ ! -e "${POLICY_RC}" ]]; then
		printf '#!/bin/sh\n# written by paddock scripts/setup.sh during apt-get install\nexit 101\n' >"${POLICY_RC}"
		chmod 0755 "${POLICY_RC}"
		POLICY_RC_OURS=1
	fi
}
unblock_service_starts() {
	if [[ ${POLICY_RC_OURS} -eq 1 ]]; then
		rm -f "${POLICY_RC}"
		POLICY_RC_OURS=0
	fi
}

install_packages() {
	local missing
	mapfile -t missing < <(missing_packages)
	if [[ ${#missing[@]} -eq 0 ]]; then
		return
	fi
	log "installing ${missing[*]} …"
	export DEBIAN_FRONTEND=noninteractive
	trap unblock_service_starts EXIT
	block_service_starts
	if ! apt-get update -q >/tmp/paddock-apt-update.log 2>&1; then
		cat /tmp/paddock-apt-update.log >&2
		die "apt-get update failed (log above): check the mirrors in /etc/apt/sources.list*"
	fi
	# --no-install-recommends: docker.io recommends git, needrestart and more
	# that Paddock does not use; what it needs is listed above.
	if ! apt-get install -y -q --no-install-recommends \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"${missing[@]}"; then
		die "apt-get install ${missing[*]} failed (output above)"
	fi
	unblock_service_starts
	trap - EXIT
	mapfile -t missing < <(missing_packages)
	if [[ ${#missing[@]} -ne 0 ]]; then
		die "still missing after apt-get install: ${missing[*]}"
	fi
}

# docker_up succeeds when the engine answers, and leaves its storage driver in
# DOCKER_DRIVER.
DOCKER_DRIVER=""
docker_up() {
	command -v docker >/dev/null && DOCKER_DRIVER="$(docker info --format '{{.Driver}}' 2>/dev/null)"
}

cgroups_mounted() {
	local fs
	fs="$(stat -f -c %T /sys/fs/cgroup 2>/dev/null || true)"
	case "${fs}" in
	cgroup2fs) return 0 ;;
	tmpfs) [[ -e /sys/fs/cgroup/memory/memory.limit_in_bytes || -e /sys/fs/cgroup/unified/cgroup.controllers ]] ;;
	*) return 1 ;;
	esac
}

start_dockerd() {
	local pid=""
	if docker_up; then
		return
	fi
	if [[ -d /run/systemd/system ]]; then
		log "starting docker.service …"
		systemctl start docker.service || die "systemctl start docker failed: see journalctl -u docker"
	else
		if ! cgroups_mounted; then
			log "mounting cgroups (cgroupfs-mount) …"
			cgroupfs-mount || die "cgroupfs-mount failed: mount the cgroup hierarchies under /sys/fs/cgroup, then rerun"
		fi
		log "starting dockerd (log: ${DOCKERD_LOG}) …"
		local -a flags=()
		if [[ -n "${PADDOCK_DOCKERD_FLAGS:-}" ]]; then
			read -r -a flags <<<"${PADDOCK_DOCKERD_FLAGS}"
		fi
		mkdir -p "$(dirname "${DOCKERD_LOG}")"
		printf '\n=== %s paddock setup.sh: dockerd %s\n' "$(date -u +%FT%TZ)" "${flags[*]:-}" >>"${DOCKERD_LOG}"
		# setsid: a new session, so dockerd outlives make and its process group.
		# 9>&-: do not hand our lock to dockerd, or the next run waits forever.
		setsid dockerd "${flags[@]}" </dev/null >>"${DOCKERD_LOG}" 2>&1 9>&- &
		pid=$!
	fi
	local wait="${PADDOCK_DOCKERD_WAIT:-60}" i
	for ((i = 0; i < wait * 4; i++)); do
		if docker_up; then
			return
		fi
		if [[ -n "${pid}" ]] && ! kill -0 "${pid}" 2>/dev/null; then
			tail -n 20 "${DOCKERD_LOG}" >&2 || true
			die "dockerd exited at start-up: read ${DOCKERD_LOG} (last lines above)"
		fi
		sleep 0.25
	done
	tail -n 20 "${DOCKERD_LOG}" >&2 2>/dev/null || true
	die "dockerd did not answer within ${wait} s: read ${DOCKERD_LOG} (last lines above); on a host where overlay2 fails, retry with PADDOCK_DOCKERD_FLAGS=--storage-driver=vfs"
}

check_docker() {
	if [[ "${DOCKER_DRIVER}" == vfs ]]; then
		log "warning: Docker uses the vfs storage driver: container start-up is slow (full copy per container)"
	fi
}

# check_go fails with what to do when go is missing or older than 1.26.
check_go() {
	local v
	if ! v=$(go env GOVERSION 2>/dev/null); then
		die "go not found on PATH: install Go 1.${GO_MIN_MINOR} or newer from the Go project's downloads into /usr/local/go (the Makefile adds /usr/local/go/bin to PATH)"
	fi
	local minor=${v#go1.}
	minor=${minor%%[.a-z]*}
	if [[ ! ${minor} =~ ^[0-9]+$ ]] || ((minor < GO_MIN_MINOR)); then
		die "${v} is too old: Paddock needs Go 1.${GO_MIN_MINOR} or newer"
	fi
}

main() {
	require_root
	check_go
	take_lock
	install_packages
	start_dockerd
	check_docker
	log ok
}

main "$@"
