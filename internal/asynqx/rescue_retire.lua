-- Rescuer.retire (rescue.go): take the dead workers' original tasks, whose
-- jobs rescue tasks carry now, out of asynq's active list and lease set once
-- their lease has expired, so that the queue's counts (the dashboard,
-- asynqmon, KEDA) stop counting them at once instead of after asynq's
-- recoverer (a pass a minute, for leases expired 30 s ago). A task asynq
-- moved itself (no lease any more) is only forgotten. The retired task
-- ends as asynq's own completion leaves it (asynq's markAsCompleteCmd, or
-- doneCmd without retention) except that its encoded message keeps
-- completed_at 0 and the processed counters are not counted.
-- KEYS[1] <prefix>retire: set of "queue|retention s|task id"
-- ARGV[1] margin s: a lease counts as expired once margin seconds past it
-- Reply: the ids of the tasks retired.
local now = tonumber(redis.call('TIME')[1])
local margin = tonumber(ARGV[1])
local out = {}
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local q, ret, id = string.match(m, '^([^|]*)|([0-9]+)|(.+)$')
  if not q then
    redis.call('SREM', KEYS[1], m)
  else
    local p = 'asynq:{' .. q .. '}:'
    local lease = redis.call('ZSCORE', p .. 'lease', id)
    if not lease then
      redis.call('SREM', KEYS[1], m)
    elseif tonumber(lease) + margin <= now then
      redis.call('LREM', p .. 'active', 0, id)
      redis.call('ZREM', p .. 'lease', id)
      ret = tonumber(ret)
      if ret > 0 then
        redis.call('ZADD', p .. 'completed', now + ret, id)
        redis.call('HSET', p .. 't:' .. id, 'state', 'completed')
      else
        redis.call('DEL', p .. 't:' .. id)
      end
      redis.call('SREM', KEYS[1], m)
      table.insert(out, id)
    end
  end
end
return out
