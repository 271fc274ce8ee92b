#!/usr/bin/env bash
# leftovers.sh: prove the test suite leaves no Paddock container behind.
#
#   scripts/leftovers.sh snapshot FILE   record the owners of the Paddock
#                                        containers on the engine now
#   scripts/leftovers.sh check FILE      fail when a container of an owner not
#                                        in FILE is still on the engine
#
# `make test` takes a snapshot before `go test` and checks after it. Every
# box carries io.paddock.managed and io.paddock.owner labels (sandbox/box.go);
# each test's worker has its own owner, so a container whose owner was not on
# the engine before the suite is one the suite made and did not remove. The
# owners recorded first are a `paddock up` or a compose fleet running beside
# the suite on a developer's machine: their containers come and go and are
# not the suite's. A leftover fails the check, is listed with its state, job
# and owner, and is then removed so the next run starts clean.
set -euo pipefail

mode=${1:?usage: leftovers.sh snapshot|check FILE}
file=${2:?usage: leftovers.sh snapshot|check FILE}

list() {
	docker ps -a --filter label=io.paddock.managed \
		--format '{{.ID}}	{{.State}}	{{.Label "io.paddock.owner"}}	{{.Label "io.paddock.job"}}	{{.CreatedAt}}'
}

case $mode in
snapshot)
	mkdir -p "$(dirname "$file")"
	list | cut -f3 | sort -u >"$file"
	;;
check)
	[ -f "$file" ] || { echo "leftovers: no snapshot $file (run the snapshot first)" >&2; exit 2; }
	left=$(list | awk -F'\t' -v snap="$file" 'BEGIN { while ((getline o < snap) > 0) before[o] = 1 } !($3 in before)')
	if [ -z "$left" ]; then
		echo "leftovers: the engine holds no container the suite made"
		exit 0
	fi
	n=$(printf '%s\n' "$left" | wc -l)
	echo "leftovers: the suite left $n Paddock container(s) on the engine:" >&2
	printf 'id\tstate\towner\tjob\tcreated\n%s\n' "$left" >&2
	echo "leftovers: a test's cleanup missed them (see the owner and job above); removing them now" >&2
	printf '%s\n' "$left" | cut -f1 | xargs -r docker rm -f >/dev/null
	exit 1
	;;
*)
	echo "leftovers: unknown mode $mode (snapshot or check)" >&2
	exit 2
	;;
esac
