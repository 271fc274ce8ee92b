-- Rescuer.rescue (rescue.go): decide, atomically with BeginRunAs
-- (results/beginrun.lua), whether a dead worker's run of a job is rescued.
-- KEYS[1] result:<key>  KEYS[2] runs:<key>  KEYS[3] task:<key>  KEYS[4] active:<worker>
-- ARGV[1] job key  ARGV[2] run  ARGV[3] task id of the run  ARGV[4] rescue task id
-- Reply: 1 rescue it (enqueue ARGV[4]); 0 nothing to do (entry removed).
local function drop()
  redis.call('HDEL', KEYS[4], ARGV[1])
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 1 then return drop() end -- it ended
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return drop() end -- started again since
local cur = redis.call('GET', KEYS[3])
if not cur then cur = ARGV[1] end
if cur == ARGV[4] then return 1 end -- claimed by an earlier pass; enqueue again
if cur ~= ARGV[3] then return drop() end -- another task carries it
local ttl = redis.call('PTTL', KEYS[2]) -- as long as the run counter
if ttl < 1000 then ttl = 86400000 end
redis.call('SET', KEYS[3], ARGV[4], 'PX', ttl)
return 1
