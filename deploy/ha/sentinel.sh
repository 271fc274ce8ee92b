# sentinel: a Redis Sentinel of the HA profile (docker-compose.ha.yml), run by
# /tools/busybox sh. On its first start it writes /data/sentinel.conf (its own
# volume: Sentinel rewrites the file with what it learns, the current
# primary, the replicas and the other sentinels, and must find it again after
# a restart). Auth is on:
#   - a client without credentials may only discover: PING, HELLO, CLIENT
#     SETNAME, SENTINEL get-master-addr-by-name / sentinels / replicas and
#     the event channels (+switch-master): which node is the primary, no
#     data (the data nodes refuse it without the password). That is what a
#     failover client needs, so Paddock's services need no Sentinel
#     password (none may sit in a URL or the environment);
#   - everything else (SENTINEL MASTER, SET, FAILOVER, MONITOR, REMOVE,
#     RESET, CONFIG, ACL, SHUTDOWN...) needs user paddock and the fleet's
#     Redis password: NOPERM without;
#   - the sentinels authenticate to each other as paddock (sentinel-user) and
#     to the data nodes as paddock (auth-user), with the password of the
#     auth-redis volume.
# The config holds the password's SHA-256 for the user and the password for
# auth-pass/sentinel-pass (0600, in the sentinel's own volume).
set -eu
b=/tools/busybox
conf=/data/sentinel.conf
if [ ! -s "$conf" ]; then
	pw=$($b tr -d '\n' </etc/redis/auth/redis.password)
	hash=$(printf '%s' "$pw" | $b sha256sum | $b cut -c1-64)
	tmp=$($b mktemp "$conf.XXXXXX")
	{
		echo "port 26379"
		echo "dir /data"
		# Fixed addresses, no names (docker-compose.ha.yml says why).
		echo "sentinel announce-ip $SENTINEL_IP"
		echo "user default on nopass -@all +ping +hello +client|setname +sentinel|get-master-addr-by-name +sentinel|sentinels +sentinel|replicas +sentinel|slaves +subscribe +psubscribe +unsubscribe +punsubscribe &*"
		echo "user paddock on #$hash ~* &* +@all"
		echo "sentinel sentinel-user paddock"
		echo "sentinel sentinel-pass \"$pw\""
		echo "sentinel monitor $REDIS_MASTER_NAME $REDIS_PRIMARY 6379 $SENTINEL_QUORUM"
		echo "sentinel auth-user $REDIS_MASTER_NAME paddock"
		echo "sentinel auth-pass $REDIS_MASTER_NAME \"$pw\""
		echo "sentinel down-after-milliseconds $REDIS_MASTER_NAME $SENTINEL_DOWN_AFTER_MS"
		echo "sentinel failover-timeout $REDIS_MASTER_NAME $SENTINEL_FAILOVER_TIMEOUT_MS"
		echo "sentinel parallel-syncs $REDIS_MASTER_NAME 1"
	} >"$tmp"
	$b chmod 0600 "$tmp"
	$b mv -f "$tmp" "$conf"
	echo "sentinel: $SENTINEL_NAME ($SENTINEL_IP) watches $REDIS_MASTER_NAME, first primary $REDIS_PRIMARY, quorum $SENTINEL_QUORUM"
else
	echo "sentinel: $SENTINEL_NAME keeps $conf (what it learnt: the primary, replicas, sentinels)"
fi
exec redis-server "$conf" --sentinel
