-- BeginRunAs (runs.go): count one more start of a job, unless the task
-- starting it no longer carries the job (a rescuer re-enqueued it under
-- another task id: internal/asynqx/rescue.go), and note the run in the worker's
-- active set, in one atomic step.
-- KEYS[1] runs:<key>  KEYS[2] task:<key>  KEYS[3] active:<worker>  KEYS[4] active (the set of workers with one)
-- ARGV[1] task id  ARGV[2] job key  ARGV[3] retention ms  ARGV[4] queue ('' with no worker: no active entry)
-- ARGV[5] '1': refresh the active keys' TTLs
local cur = redis.call('GET', KEYS[2])
if not cur then cur = ARGV[2] end
if cur ~= ARGV[1] then
  return -1
end
local n = redis.call('INCR', KEYS[1])
-- Every start renews the retention: a job re-run long after its first
-- start (a rescue, an operator's replay) keeps its count to the end.
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if KEYS[3] ~= KEYS[1] then
  redis.call('HSET', KEYS[3], ARGV[2], n .. '|' .. ARGV[1] .. '|' .. ARGV[4])
  -- The worker joins the set (and both get the retention) when its hash
  -- was empty: a rescuer's scan drops a worker from the set only when its
  -- hash is empty (rescue_scan.lua), so a hash with an entry always has
  -- its worker in the set. ARGV[5] '1' refreshes the TTLs of a worker
  -- whose hash never empties (the Store asks now and then).
  if ARGV[5] == '1' or redis.call('HLEN', KEYS[3]) == 1 then
    redis.call('PEXPIRE', KEYS[3], ARGV[3])
    redis.call('SADD', KEYS[4], string.sub(KEYS[3], string.len(KEYS[4]) + 2))
    redis.call('PEXPIRE', KEYS[4], ARGV[3])
  end
end
return n
