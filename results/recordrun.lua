-- RecordRun (record.go): the terminal result of a run, stored only while the
-- run is still the job's: the task that began it still carries the job
-- (<prefix>task:<key>, absent = the job key itself; a rescuer moves it:
-- internal/asynqx/rescue_claim.lua) and no run began since (the run counter
-- results/beginrun.lua increments is not above the run). The check and the SET NX are one step,
-- so a worker frozen between its own fence check and this write cannot
-- record over a rescue.
-- KEYS[1] result:<key>  KEYS[2] runs:<key>  KEYS[3] task:<key>
-- ARGV[1] result JSON  ARGV[2] retention ms  ARGV[3] run  ARGV[4] task id  ARGV[5] job key
-- Reply: {1, ARGV[1]} stored; {0, current} a result was there already (kept);
-- {-1, ''} the run is stale: nothing written.
local cur = redis.call('GET', KEYS[1])
if cur then
  return {0, cur}
end
-- Only positive evidence of a newer run refuses: a counter that is gone or
-- lower than the run (the last writes lost in a Redis failover) does not,
-- or a live run would end without any result.
local task = redis.call('GET', KEYS[3])
if not task then task = ARGV[5] end
local runs = tonumber(redis.call('GET', KEYS[2]) or '0')
if task ~= ARGV[4] or runs > tonumber(ARGV[3]) then
  return {-1, ''}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, ARGV[1]}
