-- refresh.lua: extend a lease, only if it is still ours.
--
-- KEYS[1]  the lease key
-- ARGV[1]  the owner token
-- ARGV[2]  the ttl in milliseconds
--
-- Returns 1 when the lease was extended, 0 when the key is gone or holds
-- another owner's token.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
