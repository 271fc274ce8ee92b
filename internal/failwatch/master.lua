-- Watcher.redis (watch.go): note a Redis master, by its replication id.
-- KEYS[1] <prefix>fleet:redis-masters (sorted set: replication id -> first seen, Unix ms)
-- ARGV[1] the master's replication id; ARGV[2] now, Unix ms; ARGV[3] entries kept
-- Reply: 1 when this id was new to the fleet, else 0.
local added = redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[1])
local keep = tonumber(ARGV[3])
if redis.call('ZCARD', KEYS[1]) > keep then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -keep - 1)
end
return added
