-- SET KEYS[1] ARGV[1] NX PX ARGV[2], returning what the key holds afterwards.
-- Reply: {1, ARGV[1]} when this call created the key, {0, current} when it
-- already existed. Portable to Redis < 7 (no SET ... NX GET).
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return {1, ARGV[1]}
end
return {0, redis.call("GET", KEYS[1])}
