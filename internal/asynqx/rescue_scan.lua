-- Rescuer.pass (rescue.go): the active entries of every worker whose
-- heartbeat key is gone. Workers with an empty active set leave the set.
-- KEYS[1] <prefix>active (workers with an active set)
-- ARGV[1] <prefix>
-- Reply: {worker, {job key, "run|task id|queue", ...}, ...}
local out = {}
for _, w in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. 'worker:' .. w) == 0 then
    local entries = redis.call('HGETALL', ARGV[1] .. 'active:' .. w)
    if #entries == 0 then
      redis.call('SREM', KEYS[1], w)
    else
      table.insert(out, w)
      table.insert(out, entries)
    end
  end
end
return out
