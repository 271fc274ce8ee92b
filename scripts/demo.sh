#!/usr/bin/env bash
# demo.sh: start the all-in-one stack, run the examples/demo.jsonl batch
# through NATS → scheduler → asynq → worker → fresh containers, print the
# results, and stop the stack. Called by `make demo` after setup and build.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=bin/paddock
data=$(mktemp -d /tmp/paddock-demo.XXXXXX)
log="$data/up.log"
ready="$data/ready"
# The stack's state, credentials included, lives in $data: the CLI finds the
# dev tenant's credentials there.
export PADDOCK_DATA_DIR="$data"

stop() {
	if [[ -n "${up_pid:-}" ]] && kill -0 "$up_pid" 2>/dev/null; then
		kill -INT "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
	fi
}
trap stop EXIT

echo "demo: starting the stack (paddock up; log: $log)"
"$bin" up --ready-file "$ready" --gateway-addr 127.0.0.1:0 >"$log" 2>&1 &
up_pid=$!
for _ in $(seq 1 600); do
	[[ -f "$ready" ]] && break
	if ! kill -0 "$up_pid" 2>/dev/null; then
		echo "demo: paddock up exited; its log:" >&2
		cat "$log" >&2
		exit 1
	fi
	sleep 0.1
done
[[ -f "$ready" ]] || { echo "demo: the stack was not ready after 60 s; log:" >&2; cat "$log" >&2; exit 1; }
grep -E '^paddock: up' "$log" || true
echo "demo: auth is on (NATS operator mode, Redis ACL); the CLI acts as tenant dev ($data/auth/creds/dev.creds)"

echo
echo "demo: submitting $(grep -vc '^#' examples/demo.jsonl) jobs and one invalid job"
echo
rc=0
"$bin" submit --wait --file examples/demo.jsonl || rc=$?
echo
echo "demo: an invalid job is rejected at the edge, with the field and the allowed range:"
"$bin" submit --wait --memory-mb 999999 --pids 0 -- 'echo never runs' || true
echo
echo "demo: a pipeline step: a CSV in, a script, a report out as an artifact, the full log kept:"
pipe_rc=0
pipe_id=$("$bin" -o json submit --wait --keep-output --image paddock/sandbox:latest \
	--in-file examples/pipeline/sales.csv:in/sales.csv --in-file examples/pipeline/report.py \
	--artifact 'out/*' -- 'python3 report.py' | sed -n 's/^{"v":[0-9]*,"id":"\([^"]*\)".*/\1/p') || pipe_rc=$?
if [[ -n "$pipe_id" ]]; then
	"$bin" artifacts "$pipe_id"
	echo "out/summary.json: $("$bin" artifacts get "$pipe_id" out/summary.json)"
	echo "the kept log has $("$bin" output "$pipe_id" | wc -l) lines; its last: $("$bin" output "$pipe_id" | tail -n 1)"
else
	echo "demo: the pipeline step failed (exit $pipe_rc)" >&2
	rc=1
fi
echo
echo "demo: an agent through the gateway's HTTP API (bearer token; two calls share the session's /workspace):"
gw=$(sed -n 's|^paddock: gateway on \(http://[^ ]*\) .*|\1|p' "$log" | head -n 1)
token=$(cat "$data/auth/dev.token")
api() { curl -sS --fail-with-body -H "Authorization: Bearer $token" -H "Content-Type: application/json" "$@"; }
if [[ -n "$gw" ]] &&
	api "$gw/v1/jobs?wait=30s" -d '{"session":"demo","command":"seq 100000 > /workspace/n.txt; wc -l < /workspace/n.txt"}' >"$data/gw1.json" &&
	api "$gw/v1/jobs?wait=30s" -d '{"session":"demo","command":"sed -n 4242p /workspace/n.txt"}' >"$data/gw2.json"; then
	for f in "$data/gw1.json" "$data/gw2.json"; do
		sed -n 's/^{"v":[0-9]*,"id":"\([^"]*\)".*"state":"\([a-z]*\)".*"stdout":{"text":"\([^"]*\)".*/job \1: \2, stdout \3/p' "$f"
	done
	api -X DELETE "$gw/v1/sessions/demo" -o /dev/null -w 'session demo ended: HTTP %{http_code}, its workspace deleted\n'
	echo "MCP: the same gateway serves one bash tool at $gw/mcp (docs/gateway.md)"
else
	echo "demo: the gateway step failed; stack log:" >&2
	tail -n 30 "$log" >&2
	rc=1
fi
echo
# Exit code 2 means "some jobs did not succeed": expected here.
if [[ $rc -ne 0 && $rc -ne 2 ]]; then
	echo "demo: submit failed (exit $rc); stack log:" >&2
	tail -n 50 "$log" >&2
	exit 1
fi
echo "demo: done. Run the stack yourself with 'bin/paddock up' and 'bin/paddock submit --wait -- \"echo hi\"'."
