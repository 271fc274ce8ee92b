-- obtain.lua: take a lease and issue its fencing token in one atomic step, so
-- that a token is only ever issued to the owner of the lease.
--
-- KEYS[1]  the lease key
-- KEYS[2]  the resource's fencing counter (never expires, never deleted)
-- ARGV[1]  the owner token (128 random bits): the lease key's value
-- ARGV[2]  the ttl in milliseconds
-- ARGV[3]  a floor: the highest fencing token the storage has recorded (0
--          when unknown). A counter found at or below it (Redis lost data)
--          jumps past it, so new holders are not rejected as stale forever.
--
-- Returns {fencing token, 1 if the counter was raised to the floor else 0},
-- or false (a nil reply) when the lease is held by someone else.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return false
end
local token = redis.call("INCR", KEYS[2])
if token <= tonumber(ARGV[3]) then
  -- SET the decimal string from the client, then INCR: Lua numbers are
  -- doubles and would print large values in exponent form.
  redis.call("SET", KEYS[2], ARGV[3])
  return {redis.call("INCR", KEYS[2]), 1}
end
return {token, 0}
