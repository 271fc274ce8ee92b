# redis-node: a Redis data node of the HA profile (docker-compose.ha.yml), run
# by /tools/busybox sh with the redis-server command line as its arguments
# (the durability settings live there, as in docker-compose.yml).
#
# Nodes are known by their fixed addresses (REDIS_NODE_IP, REDIS_PRIMARY,
# SENTINELS; docker-compose.ha.yml says why not names). Each start it writes
# /data/redis-ha.conf (0600: it holds the password replication
# authenticates with) and decides its role:
#   - it asks the sentinels ($SENTINELS) who the primary of $REDIS_MASTER_NAME
#     is; if one answers with another node, it starts as that node's replica
#     (an old primary coming back after a failover rejoins as a replica, with
#     whatever it wrote after the last sync discarded: the NATS hold recovers
#     those jobs, docs/operations.md);
#   - if no sentinel answers (the first start of the fleet), $REDIS_PRIMARY
#     starts as the primary and every other node as its replica.
# The sentinels then move the roles on failovers (REPLICAOF + CONFIG REWRITE
# of this file).
set -eu
b=/tools/busybox
me=$REDIS_NODE_IP
pw=$($b tr -d '\n' </etc/redis/auth/redis.password)
export REDISCLI_AUTH="$pw"

primary=""
for s in $SENTINELS; do
	out=$($b timeout 3 redis-cli -h "${s%:*}" -p "${s#*:}" --no-auth-warning \
		sentinel get-master-addr-by-name "$REDIS_MASTER_NAME" 2>/dev/null || true)
	host=$(echo "$out" | $b head -n 1)
	if [ -n "$host" ] && ! echo "$out" | $b grep -q -i -e err -e noauth; then
		primary=$host
		echo "redis-node: sentinel $s says the primary is $primary"
		break
	fi
done
if [ -z "$primary" ]; then
	primary=$REDIS_PRIMARY
	echo "redis-node: no sentinel answers: first start, the primary is $primary"
fi
unset REDISCLI_AUTH

conf=/data/redis-ha.conf
tmp=$($b mktemp "$conf.XXXXXX")
{
	# The fixed address, whatever the replica's connection comes from.
	echo "replica-announce-ip $me"
	echo "masteruser paddock"
	echo "masterauth \"$pw\""
	if [ "$primary" != "$me" ]; then
		echo "replicaof $primary 6379"
	fi
} >"$tmp"
$b chmod 0600 "$tmp"
$b mv -f "$tmp" "$conf"
[ "${1:-}" = redis-server ] && shift
echo "redis-node: $REDIS_NODE ($me) starts as $([ "$primary" = "$me" ] && echo primary || echo "replica of $primary")"
exec redis-server "$conf" "$@"
