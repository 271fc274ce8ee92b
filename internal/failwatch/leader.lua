-- Watcher.streams (watch.go): note a JetStream stream's leader. Every
-- watcher of the fleet calls it; only the first to see a new leader counts
-- the change, so N watchers count one leader change once.
-- KEYS[1] <prefix>fleet:stream-leaders (hash: stream -> leader)
-- KEYS[2] <prefix>fleet:stream-leader-changes (hash: stream -> changes; "*" -> all, "*at" -> last, Unix ms)
-- ARGV[1] stream; ARGV[2] leader; ARGV[3] now, Unix ms
-- Reply: 1 when the leader changed from a known one, else 0.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur == ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if not cur then
  return 0
end
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('HINCRBY', KEYS[2], '*', 1)
redis.call('HSET', KEYS[2], '*at', ARGV[3])
return 1
