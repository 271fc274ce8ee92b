# auth-ha: the HA profile's part of the credentials (docker-compose.ha.yml),
# run by /tools/busybox sh after the one-shot `auth` (which made everything of
# the single-node fleet). Idempotent: it keeps what exists.
#
#   /state/auth/nats-route.password  made once: the NATS cluster's route
#                                    password (0600; back it up with the rest)
#   /to/nats/nats-routes.conf        the cluster's route authorization and the
#                                    route URLs of $NATS_NODES, for the NATS
#                                    nodes (65532, 0600), included by nats-ha.conf
#   /to/redis/redis.password         the Redis password for the data nodes
#                                    (replication: masterauth) and the sentinels
#                                    (auth-pass and their own users), 999, 0600
set -eu
b=/tools/busybox
a=/state/auth
umask 077

# put SRC DST OWNER: DST becomes a copy of SRC, 0600, owned by OWNER (atomic).
put() {
	tmp=$($b mktemp "$2.XXXXXX")
	$b cp "$1" "$tmp"
	$b chown "$3" "$tmp"
	$b chmod 0600 "$tmp"
	$b mv -f "$tmp" "$2"
}

[ -s "$a/redis.password" ] || { echo "auth-ha: $a/redis.password missing: did the one-shot auth run?" >&2; exit 1; }
if [ ! -s "$a/nats-route.password" ]; then
	tmp=$($b mktemp "$a/nats-route.password.XXXXXX")
	$b head -c 32 /dev/urandom | $b sha256sum | $b cut -c1-64 >"$tmp"
	$b mv -f "$tmp" "$a/nats-route.password"
fi
pw=$($b tr -d '\n' <"$a/nats-route.password")

# The fragment: the route user, and a route to every node (a node's route to
# itself is recognised and dropped by the server).
conf=$($b mktemp "$a/nats-routes.conf.XXXXXX")
{
	printf 'authorization { user: route, password: "%s", timeout: 2 }\n' "$pw"
	printf 'routes: [\n'
	for n in $NATS_NODES; do
		u="route:$pw"
		printf '  nats-route://%s@%s:6222\n' "$u" "$n"
	done
	printf ']\n'
} >"$conf"
put "$conf" /to/nats/nats-routes.conf "$NATS_USER"
$b rm -f "$conf"
put "$a/redis.password" /to/redis/redis.password "$REDIS_USER"
echo "auth-ha: route authorization for $NATS_NODES, the Redis password for the data nodes and sentinels"
