#!/usr/bin/env bash
# build-images.sh: build Paddock's images without a container registry.
#
#   scripts/build-images.sh [--force] [TARGET...]
#
# Targets (default: all):
#   test         paddock/test:latest         FROM scratch: static busybox + bash (~4 MB, ~2 s)
#   sandbox      paddock/sandbox:latest      Debian bookworm via mmdebstrap + docker import
#                                            (bash coreutils python3 jq gawk procps ca-certificates curl)
#   sandbox-pip  paddock/sandbox-pip:latest  sandbox + python3-pip python3-venv
#   paddock      paddock/paddock:latest      static paddock + paddock-init, FROM scratch
#                (PADDOCK_IMAGE=name:tag builds it under that tag, which compose reads)
#   nats         paddock/nats:latest         FROM scratch: static nats-server built from its Go
#                                            module (JetStream; for docker-compose.yml)
#   redis        paddock/redis:latest        FROM scratch: the host's Debian redis-server and
#                                            redis-cli with the libraries they link
#   all          test sandbox
#
# test, sandbox, sandbox-pip, nats and redis are built only when the image is
# absent or its recipe changed (label io.paddock.recipe); --force rebuilds
# them. paddock is rebuilt on every call: the Go build cache and Docker's layer
# cache make an unchanged tree a no-op, and a stale worker image is worse than
# a second's work.
#
# Needs root (mmdebstrap), a running Docker engine and the Debian packages that
# scripts/setup.sh installs. Recipes and docs: deploy/images/.
set -euo pipefail
umask 022

readonly PATH_IN_IMAGE=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
readonly SUITE=bookworm
# Keep in step with deploy/images/sandbox.Dockerfile. bash and coreutils are
# Essential (always there); they are listed to say that the image promises them.
readonly SANDBOX_PACKAGES=(bash coreutils python3 jq gawk procps ca-certificates curl)
readonly SANDBOX_PIP_PACKAGES=(python3-pip python3-venv)
readonly LOCK_FILE=/run/lock/paddock-build-images.lock

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ROOT
readonly IMAGES_DIR="${ROOT}/deploy/images"

FORCE=0
WORKDIR_TMP=""

log() { printf 'build-images: %s\n' "$*"; }
die() {
	printf 'build-images: error: %s\n' "$*" >&2
	exit 1
}

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

cleanup() {
	if [[ -n "${WORKDIR_TMP}" && -d "${WORKDIR_TMP}" ]]; then
		rm -rf "${WORKDIR_TMP}"
	fi
}

# new_workdir NAME prints a fresh directory under WORKDIR_TMP, which main
# creates on disk (not tmpfs: the sandbox rootfs tar is ~130 MB) and removes on
# exit. It runs in $(...), a subshell: it must not set state or traps itself.
new_workdir() {
	mktemp -d "${WORKDIR_TMP}/$1.XXXXXX"
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
human_size() { awk -v n="$1" 'BEGIN { printf "%.1f MB", n / 1000000 }'; }

require() {
	local cmd="$1" pkg="$2"
	command -v "${cmd}" >/dev/null || die "${cmd} not found: run scripts/setup.sh (installs ${pkg})"
}

preflight() {
	[[ ${EUID} -eq 0 ]] || die "run as root (mmdebstrap needs it): sudo $0 $*"
	require docker docker.io
	docker info >/dev/null 2>&1 || die "Docker engine not reachable: run scripts/setup.sh (starts dockerd), then retry"
	mkdir -p "$(dirname "${LOCK_FILE}")"
	exec 9>"${LOCK_FILE}"
	if ! flock -n 9; then
		log "waiting for another build-images.sh …"
		flock 9
	fi
}

sha() { sha256sum | cut -c1-16; }

# image_state IMAGE RECIPE prints "missing", "stale" or "current".
image_state() {
	local have
	if ! have="$(docker image inspect --format '{{ index .Config.Labels "io.paddock.recipe" }}' "$1" 2>/dev/null)"; then
		echo missing
	elif [[ "${have}" != "$2" ]]; then
		echo stale
	else
		echo current
	fi
}

# should_build IMAGE RECIPE decides and says why.
should_build() {
	local state
	state="$(image_state "$1" "$2")"
	if [[ ${FORCE} -eq 1 ]]; then
		log "$1: rebuilding (--force)"
	elif [[ "${state}" == current ]]; then
		log "$1: present, skipped (--force rebuilds)"
		return 1
	elif [[ "${state}" == stale ]]; then
		log "$1: recipe changed, rebuilding"
	else
		log "$1: building"
	fi
}

image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# drop_previous OLD_ID IMAGE removes the image a rebuild replaced, now untagged;
# the engine refuses (and we ignore it) while containers still use it.
drop_previous() {
	local old="$1" image="$2"
	if [[ -n "${old}" && "${old}" != "$(image_id "${image}")" ]]; then
		docker image rm "${old}" >/dev/null 2>&1 || true
	fi
}

report() {
	local image="$1" started="$2" size
	size="$(docker image inspect --format '{{.Size}}' "${image}")"
	log "${image}: done in $(elapsed "${started}") s, $(human_size "${size}")"
}

# docker_build CONTEXT DOCKERFILE IMAGE [FLAG...] runs the classic builder
# (FROM scratch needs no BuildKit, and a docker.io-only host has no buildx) and
# shows its output only when it fails: newer CLIs warn that it is deprecated.
docker_build() {
	local ctx="$1" dockerfile="$2" image="$3" out
	shift 3
	out="$(DOCKER_BUILDKIT=0 docker build --force-rm "$@" -t "${image}" -f "${dockerfile}" "${ctx}" 2>&1)" || {
		printf '%s\n' "${out}" >&2
		die "docker build of ${image} failed (output above)"
	}
}

# ---------------------------------------------------------------- test image

busybox_path() {
	local p
	for p in /bin/busybox /usr/bin/busybox; do
		if [[ -x "${p}" ]] && file_is_static "${p}"; then
			echo "${p}"
			return
		fi
	done
	die "static busybox not found: run scripts/setup.sh (installs busybox-static)"
}

bash_static_path() {
	local p
	for p in /bin/bash-static /usr/bin/bash-static; do
		if [[ -x "${p}" ]]; then
			echo "${p}"
			return
		fi
	done
	die "bash-static not found: run scripts/setup.sh (installs bash-static)"
}

# file_is_static: a dynamically linked ELF has a PT_INTERP program header,
# i.e. the string of its loader near the start of the file.
file_is_static() {
	! head -c 4096 "$1" | grep -qa 'ld-linux'
}

# test_context DIR assembles the build context of test.Dockerfile in DIR.
test_context() {
	local dir="$1" busybox bash_static applet
	busybox="$(busybox_path)"
	bash_static="$(bash_static_path)"
	install -d -m 0755 "${dir}/rootfs" "${dir}/rootfs/bin" "${dir}/rootfs/etc"
	install -d -m 1777 "${dir}/rootfs/tmp"
	install -d -m 0777 "${dir}/rootfs/workspace"
	install -m 0755 "${busybox}" "${dir}/rootfs/bin/busybox"
	install -m 0755 "${bash_static}" "${dir}/rootfs/bin/bash"
	while read -r applet; do
		case "${applet}" in
		'' | busybox | bash | */*) continue ;;
		esac
		ln -s busybox "${dir}/rootfs/bin/${applet}"
	done < <("${busybox}" --list)
	for applet in sh sleep cat head dd yes nc wget ping nslookup; do
		[[ -e "${dir}/rootfs/bin/${applet}" ]] || log "note: this busybox has no ${applet} applet"
	done
	printf '%s\n' \
		'root:x:0:0:root:/root:/bin/sh' \
		'sandbox:x:1000:1000:sandbox:/tmp:/bin/bash' >"${dir}/rootfs/etc/passwd"
	printf '%s\n' 'root:x:0:' 'sandbox:x:1000:' >"${dir}/rootfs/etc/group"
	chmod 0644 "${dir}/rootfs/etc/passwd" "${dir}/rootfs/etc/group"
}

test_recipe() {
	{
		declare -f test_context
		cat "${IMAGES_DIR}/test.Dockerfile"
		dpkg-query -W -f='${Package} ${Version}\n' busybox-static bash-static 2>/dev/null || true
	} | sha
}

build_test() {
	local image=paddock/test:latest recipe started ctx old
	recipe="$(test_recipe)"
	should_build "${image}" "${recipe}" || return 0
	[[ -f "${IMAGES_DIR}/test.Dockerfile" ]] || die "${IMAGES_DIR}/test.Dockerfile missing: run from a full checkout"
	started="$(now)"
	old="$(image_id "${image}")"
	ctx="$(new_workdir test)"
	chmod 0755 "${ctx}"
	test_context "${ctx}"
	docker_build "${ctx}" "${IMAGES_DIR}/test.Dockerfile" "${image}" \
		--label "io.paddock.recipe=${recipe}" --label org.opencontainers.image.title=paddock/test
	drop_previous "${old}" "${image}"
	report "${image}" "${started}"
}

# ------------------------------------------------------------ sandbox images

# host_mirror SUITE_SUFFIX prints the first URI of the host's apt sources that
# serves ${SUITE}${SUITE_SUFFIX} (e.g. "" or "-security"), or nothing. Reads
# one-line *.list and deb822 *.sources files; ignores disabled ones.
host_mirror() {
	local want="${SUITE}$1" f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -f "${f}" ]] || continue
		case "${f}" in
		*.sources)
			awk -v want="${want}" '
				function flush() { if (deb && uri != "" && suites ~ ("(^| )" want "( |$)")) { print uri; found = 1; exit } deb = 0; uri = ""; suites = "" }
				/^[ \t]*$/ { flush(); next }
				/^[ \t]*#/ { next }
				tolower($1) == "types:" { deb = ($0 ~ /[ \t]deb([ \t]|$)/) }
				tolower($1) == "uris:" { uri = $2 }
				tolower($1) == "suites:" { $1 = ""; suites = $0; sub(/^ +/, "", suites) }
				tolower($1) == "enabled:" && tolower($2) == "no" { uri = "" }
				END { if (!found) flush() }' "${f}"
			;;
		*)
			# deb [options] URI SUITE COMPONENTS...
			awk -v want="${want}" '
				$1 != "deb" { next }
				{ i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } }
				$(i + 1) == want { print $i; exit }' "${f}"
			;;
		esac
	done | head -n 1
}

# sandbox_mirrors prints the apt lines for the rootfs: the host's Debian mirror
# (the one machine's apt already reaches), else deb.debian.org.
sandbox_mirrors() {
	local main security
	main="$(host_mirror "")"
	security="$(host_mirror -security)"
	main="${main:-http://deb.debian.org/debian}"
	security="${security:-http://deb.debian.org/debian-security}"
	echo "deb ${main%/} ${SUITE} main"
	echo "deb ${main%/} ${SUITE}-updates main"
	echo "deb ${security%/} ${SUITE}-security main"
}

# host_aptopts prints mmdebstrap --aptopt flags copying the host apt settings
# that decide whether a mirror is reachable at all (proxy, snapshot validity).
host_aptopts() {
	local key value dump
	dump="$(apt-config dump 2>/dev/null || true)"
	for key in Acquire::http::Proxy Acquire::https::Proxy Acquire::Check-Valid-Until Acquire::Check-Date; do
		value="$(awk -v k="${key}" '$1 == k { $1 = ""; sub(/^ /, ""); print; exit }' <<<"${dump}")"
		value="${value%;}"
		if [[ -n "${value}" ]]; then
			echo "--aptopt=${key} ${value};"
		fi
	done
}

# Customize hooks run on the host with the rootfs as $1 (expanded by
# mmdebstrap, hence the single quotes).
# shellcheck disable=SC2016
readonly SANDBOX_HOOKS=(
	'chroot "$1" groupadd --gid 1000 sandbox'
	'chroot "$1" useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /bin/bash sandbox'
	'install -d -m 0777 "$1/workspace"'
	'rm -rf "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/var/log/apt "$1"/var/log/dpkg.log "$1"/var/log/alternatives.log'
)
readonly SANDBOX_DPKGOPTS=(
	'path-exclude=/usr/share/man/*'
	'path-exclude=/usr/share/doc/*'
	'path-include=/usr/share/doc/*/copyright'
	'path-exclude=/usr/share/info/*'
	'path-exclude=/usr/share/locale/*'
	'path-exclude=/usr/share/lintian/*'
)

sandbox_recipe() {
	printf '%s\n' "${SUITE}" "$@" "${SANDBOX_HOOKS[@]}" "${SANDBOX_DPKGOPTS[@]}" "${PATH_IN_IMAGE}" merged-usr | sha
}

# build_debian IMAGE PACKAGE... builds a bookworm rootfs with mmdebstrap and
# loads it with docker import.
build_debian() {
	local image="$1" recipe started dir tar t0 include hook opt line old
	shift
	recipe="$(sandbox_recipe "$@")"
	should_build "${image}" "${recipe}" || return 0
	require mmdebstrap mmdebstrap
	started="$(now)"
	old="$(image_id "${image}")"
	dir="$(new_workdir "${image//[\/:]/-}")"
	tar="${dir}/rootfs.tar"
	include="$(IFS=,; echo "$*")"

	# merged-usr hook: the /usr symlinks without the usrmerge package, which
	# would pull in perl (~50 MB); force-unsafe-io: no fsync for a throwaway tree.
	local -a args=(--variant=minbase --format=tar --include="${include}"
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --dpkgopt=force-unsafe-io)
	for hook in "${SANDBOX_HOOKS[@]}"; do
		args+=(--customize-hook="${hook}")
	done
	for opt in "${SANDBOX_DPKGOPTS[@]}"; do
		args+=(--dpkgopt="${opt}")
	done
	while read -r opt; do
		args+=("${opt}")
	done < <(host_aptopts)
	args+=("${SUITE}" "${tar}")
	while read -r line; do
		args+=("${line}")
	done < <(sandbox_mirrors)

	local mlog="/var/log/paddock-mmdebstrap-${image%%:*}.log"
	mlog="${mlog//paddock\//}"
	log "${image}: mmdebstrap ${SUITE} from $(sandbox_mirrors | awk 'NR == 1 { print $2 }') (+ $*), log: ${mlog} …"
	t0="$(now)"
	if ! mmdebstrap "${args[@]}" >"${mlog}" 2>&1; then
		tail -n 25 "${mlog}" >&2
		die "mmdebstrap failed (last lines above, all in ${mlog}): check that the mirrors in /etc/apt/sources.list* are reachable"
	fi
	log "${image}: rootfs $(human_size "$(stat -c %s "${tar}")") tar in $(elapsed "${t0}") s; docker import …"
	t0="$(now)"
	docker import \
		--change "ENV PATH=${PATH_IN_IMAGE}" \
		--change 'ENV LANG=C.UTF-8' \
		--change 'WORKDIR /workspace' \
		--change 'USER 1000:1000' \
		--change 'CMD ["/bin/bash"]' \
		--change "LABEL io.paddock.recipe=${recipe}" \
		--change "LABEL org.opencontainers.image.title=${image%:*}" \
		--message "paddock scripts/build-images.sh: mmdebstrap ${SUITE} + $*" \
		"${tar}" "${image}" >/dev/null ||
		die "docker import of ${image} failed (output above)"
	log "${image}: imported in $(elapsed "${t0}") s"
	rm -f "${tar}"
	drop_previous "${old}" "${image}"
	report "${image}" "${started}"
}

build_sandbox() { build_debian paddock/sandbox:latest "${SANDBOX_PACKAGES[@]}"; }
build_sandbox_pip() {
	build_debian paddock/sandbox-pip:latest "${SANDBOX_PACKAGES[@]}" "${SANDBOX_PIP_PACKAGES[@]}"
}

# ------------------------------------------------------------- paddock image

build_paddock() {
	local image="${PADDOCK_IMAGE:-paddock/paddock:latest}" started ctx rootfs pkg t0 old
	log "${image}: building (binaries, then image)"
	started="$(now)"
	old="$(image_id "${image}")"
	require go "golang (https://go.dev/dl, Go 1.26)"
	for pkg in cmd/paddock cmd/paddock-init; do
		[[ -d "${ROOT}/${pkg}" ]] || die "${ROOT}/${pkg} does not exist yet: nothing to build for ${image}"
	done
	ctx="$(new_workdir paddock)"
	chmod 0755 "${ctx}"
	rootfs="${ctx}/rootfs"
	install -d -m 0755 "${rootfs}/usr/local/bin" "${rootfs}/usr/local/lib/paddock" "${rootfs}/etc/ssl/certs"
	install -d -m 1777 "${rootfs}/tmp"
	t0="$(now)"
	(
		cd "${ROOT}"
		export CGO_ENABLED=0
		# Chained with &&: `set -e` does not apply inside a subshell whose
		# status is tested by ||, so a failed first build would go unnoticed.
		go build -trimpath -ldflags='-s -w' -o "${rootfs}/usr/local/bin/paddock" ./cmd/paddock &&
			go build -trimpath -ldflags='-s -w' -o "${rootfs}/usr/local/lib/paddock/paddock-init" ./cmd/paddock-init
	) || die "go build failed (output above)"
	log "${image}: go build in $(elapsed "${t0}") s"
	if [[ -r /etc/ssl/certs/ca-certificates.crt ]]; then
		install -m 0644 /etc/ssl/certs/ca-certificates.crt "${rootfs}/etc/ssl/certs/ca-certificates.crt"
	else
		log "note: /etc/ssl/certs/ca-certificates.crt missing (install ca-certificates): image has no CA bundle"
	fi
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"${rootfs}/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"${rootfs}/etc/group"
	docker_build "${ctx}" "${IMAGES_DIR}/paddock-local.Dockerfile" "${image}" \
		--label org.opencontainers.image.title=paddock/paddock
	drop_previous "${old}" "${image}"
	report "${image}" "${started}"
}

# ---------------------------------------------------- nats and redis images
# The shared services of docker-compose.yml, for hosts without a registry.
# Recipes: deploy/nats/, deploy/redis/.

# The nats-server module version: the one Paddock embeds (go.mod).
readonly NATS_VERSION=v2.15.2
readonly NATS_MODULE=github.com/nats-io/nats-server/v2
readonly NATS_UID=65532
readonly REDIS_UID=999

# rootfs_tar DIR packs DIR/rootfs into DIR/rootfs.tar with numeric owners, for
# a Dockerfile that ADDs it (ADD keeps owners, COPY does not).
rootfs_tar() {
	tar --numeric-owner -C "$1/rootfs" -cf "$1/rootfs.tar" .
	rm -rf "$1/rootfs"
}

nats_recipe() {
	{
		echo "${NATS_MODULE}@${NATS_VERSION}"
		go version 2>/dev/null || true
		declare -f nats_context rootfs_tar
		cat "${ROOT}/deploy/nats/nats-local.Dockerfile" "${ROOT}/deploy/nats/nats.conf"
	} | sha
}

# nats_context DIR builds nats-server (CGO_ENABLED=0) from the Go module
# proxy or module cache and assembles the context of nats-local.Dockerfile.
nats_context() {
	local dir="$1" rootfs="$1/rootfs"
	install -d -m 0755 "${rootfs}/etc/nats" "${dir}/bin"
	install -d -m 1777 "${rootfs}/tmp"
	install -d -m 0750 -o "${NATS_UID}" -g "${NATS_UID}" "${rootfs}/data"
	# go install MODULE@VERSION builds with the module's own go.mod, outside
	# Paddock's module; the Go build cache makes a rebuild quick.
	(
		cd "${dir}"
		GOFLAGS='' GOBIN="${dir}/bin" CGO_ENABLED=0 \
			go install -trimpath -ldflags='-s -w' "${NATS_MODULE}@${NATS_VERSION}"
	) || die "go install ${NATS_MODULE}@${NATS_VERSION} failed (output above): the Go module proxy must be reachable the first time"
	install -m 0755 "${dir}/bin/nats-server" "${rootfs}/nats-server"
	install -m 0644 "${ROOT}/deploy/nats/nats.conf" "${rootfs}/etc/nats/nats.conf"
	printf '%s\n' 'root:x:0:0:root:/:/sbin/nologin' "nats:x:${NATS_UID}:${NATS_UID}:nats:/data:/sbin/nologin" >"${rootfs}/etc/passwd"
	printf '%s\n' 'root:x:0:' "nats:x:${NATS_UID}:" >"${rootfs}/etc/group"
	rootfs_tar "${dir}"
}

build_nats() {
	local image=paddock/nats:latest recipe started ctx old
	require go "golang (https://go.dev/dl, Go 1.26)"
	recipe="$(nats_recipe)"
	should_build "${image}" "${recipe}" || return 0
	started="$(now)"
	old="$(image_id "${image}")"
	ctx="$(new_workdir nats)"
	chmod 0755 "${ctx}"
	nats_context "${ctx}"
	docker_build "${ctx}" "${ROOT}/deploy/nats/nats-local.Dockerfile" "${image}" \
		--label "io.paddock.recipe=${recipe}" --label org.opencontainers.image.title=paddock/nats \
		--label "org.opencontainers.image.version=${NATS_VERSION}"
	drop_previous "${old}" "${image}"
	report "${image}" "${started}"
}

readonly REDIS_BINARIES=(/usr/bin/redis-check-rdb /usr/bin/redis-cli)

# redis_files prints the binaries and every shared object they load (ldd),
# including the dynamic loader, one path a line.
redis_files() {
	local bin
	for bin in "${REDIS_BINARIES[@]}"; do
		[[ -x "${bin}" ]] || die "${bin} not found: run scripts/setup.sh (installs redis-server)"
		echo "${bin}"
		ldd "${bin}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
	done | sort -u
}

redis_recipe() {
	{
		declare -f redis_context redis_files rootfs_tar
		cat "${ROOT}/deploy/redis/redis-local.Dockerfile"
		# The versions of the packages owning the binaries and libraries.
		# (dpkg knows a file under /lib or /usr/lib: ask for both spellings.)
		{ redis_files; redis_files | xargs -r readlink -f; } | xargs -r dpkg-query -S 2>/dev/null |
			cut -d: -f1 | tr -s ', ' '\n' | sort -u | xargs -r dpkg-query -W -f='${Package} ${Version}\n' 2>/dev/null || true
	} | sha
}

# redis_context DIR assembles the context of redis-local.Dockerfile: the
# binaries and libraries at the paths ldd printed (the loader finds the
# libraries in its default multiarch directories; no ld.so.cache needed).
redis_context() {
	local dir="$1" rootfs="$1/rootfs" f
	install -d -m 0755 "${rootfs}/usr/bin" "${rootfs}/etc"
	install -d -m 1777 "${rootfs}/tmp"
	install -d -m 0750 -o "${REDIS_UID}" -g "${REDIS_UID}" "${rootfs}/data"
	while read -r f; do
		install -D -m 0755 "$(readlink -f "${f}")" "${rootfs}${f}"
	done < <(redis_files)
	# redis-server and redis-check-aof are redis-check-rdb under other names.
	ln -s redis-check-rdb "${rootfs}/usr/bin/redis-server"
	ln -s redis-check-rdb "${rootfs}/usr/bin/redis-check-aof"
	printf '%s\n' 'root:x:0:0:root:/:/sbin/nologin' "redis:x:${REDIS_UID}:${REDIS_UID}:redis:/data:/sbin/nologin" >"${rootfs}/etc/passwd"
	printf '%s\n' 'root:x:0:' "redis:x:${REDIS_UID}:" >"${rootfs}/etc/group"
	rootfs_tar "${dir}"
}

build_redis() {
	local image=paddock/redis:latest recipe started ctx old version
	recipe="$(redis_recipe)"
	should_build "${image}" "${recipe}" || return 0
	started="$(now)"
	old="$(image_id "${image}")"
	ctx="$(new_workdir redis)"
	chmod 0755 "${ctx}"
	redis_context "${ctx}"
	version="$(dpkg-query -W -f='${Version}' redis-server 2>/dev/null || echo unknown)"
	docker_build "${ctx}" "${ROOT}/deploy/redis/redis-local.Dockerfile" "${image}" \
		--label "io.paddock.recipe=${recipe}" --label org.opencontainers.image.title=paddock/redis \
		--label "org.opencontainers.image.version=${version}"
	drop_previous "${old}" "${image}"
	report "${image}" "${started}"
}

# ---------------------------------------------------------------------- main

main() {
	local -a targets=()
	local arg
	for arg in "$@"; do
		case "${arg}" in
		--force | -f) FORCE=1 ;;
		-h | --help)
			usage
			exit 0
			;;
		all) targets+=(test sandbox) ;;
		test | sandbox | sandbox-pip | paddock | nats | redis) targets+=("${arg}") ;;
		*)
			usage >&2
			die "unknown argument: ${arg}"
			;;
		esac
	done
	if [[ ${#targets[@]} -eq 0 ]]; then
		targets=(test sandbox)
	fi
	preflight "$@"
	WORKDIR_TMP="$(mktemp -d "${TMPDIR:-/var/tmp}/paddock-images.XXXXXX")"
	trap cleanup EXIT
	local started t
	started="$(now)"
	# Deduplicate, keep order.
	local -A seen=()
	for t in "${targets[@]}"; do
		[[ -z "${seen[${t}]:-}" ]] || continue
		seen[${t}]=1
		case "${t}" in
		test) build_test ;;
		sandbox) build_sandbox ;;
		sandbox-pip) build_sandbox_pip ;;
		paddock) build_paddock ;;
		nats) build_nats ;;
		redis) build_redis ;;
		esac
	done
	log "ok ($(elapsed "${started}") s)"
}

main "$@"
