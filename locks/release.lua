-- release.lua: delete a lease, only if it is still ours.
--
-- KEYS[1]  the lease key
-- ARGV[1]  the owner token
--
-- Returns 1 when the lease was deleted, 0 when the key is gone or holds
-- another owner's token (which is left alone).
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
