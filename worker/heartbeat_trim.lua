-- Heartbeat.beat (heartbeat.go): forget the workers whose last beat is
-- older than the known-workers TTL, in the known set and in the last-beat
-- hash together (at most 1000 a call; the next trim takes the rest).
-- KEYS[1] <prefix>workers (sorted set: worker id -> last beat, Unix ms)
-- KEYS[2] <prefix>workers:last (hash: worker id -> its last job.WorkerBeat)
-- ARGV[1] the oldest beat kept, Unix ms
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, 1000)
if #old > 0 then
  redis.call('ZREM', KEYS[1], unpack(old))
  redis.call('HDEL', KEYS[2], unpack(old))
end
return #old
