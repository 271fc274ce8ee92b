-- Updates one job's entry in the job index (index.go).
-- KEYS: 1 the job's hash, 2 the tenant's by-queued zset, 3 the fleet's
-- by-queued zset, 4 the tenant's by-update zset, 5 the fleet's by-update
-- zset, 6 the fleet's reason counts of the current 5-minute bucket.
-- ARGV: 1 mode (queued | running | final), 2 member (tenant/id),
-- 3 retention in ms, 4 queued score in ms (when the hash has none yet),
-- 5 n: the number of state field/value pairs that follow, then those
-- pairs, then static field/value pairs.
-- A terminal entry never changes again (the stored result is immutable),
-- and a queued write never takes a running job back to queued.
-- Returns 1 when the entry changed, 0 when it was left as it was.
local mode, member = ARGV[1], ARGV[2]
local ret = tonumber(ARGV[3])
local terminal = {succeeded = true, failed = true, rejected = true, canceled = true, infra = true}
local cur = redis.call("HGET", KEYS[1], "state")
if cur and terminal[cur] then
  return 0
end
local t = redis.call("TIME")
local nowus = t[1] .. string.format("%06d", tonumber(t[2]))
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[5])
local applyState = not (mode == "queued" and cur == "running")
local i = 6
for k = 1, n do
  if applyState then
    redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
  end
  i = i + 2
end
while i < #ARGV do
  local f, v = ARGV[i], ARGV[i + 1]
  if f == "q" or f == "cmd" or f == "st" then
    redis.call("HSETNX", KEYS[1], f, v)
  elseif v ~= "" then
    redis.call("HSET", KEYS[1], f, v)
  end
  i = i + 2
end
if mode == "running" then
  redis.call("HSET", KEYS[1], "st", string.format("%d", nowms))
  redis.call("HINCRBY", KEYS[1], "runs", 1)
end
if mode == "final" then
  local reason = redis.call("HGET", KEYS[1], "reason")
  if reason then
    redis.call("HINCRBY", KEYS[6], reason, 1)
    redis.call("PEXPIRE", KEYS[6], 7200000)
  end
end
local q = redis.call("HGET", KEYS[1], "q")
if not q then
  q = ARGV[4]
  redis.call("HSET", KEYS[1], "q", q)
end
redis.call("HSET", KEYS[1], "up", nowus)
redis.call("PEXPIRE", KEYS[1], ret)
local cutms = string.format("%d", nowms - ret)
local cutus = string.format("%d", (nowms - ret) * 1000)
for k = 2, 3 do
  redis.call("ZADD", KEYS[k], "NX", q, member)
  redis.call("ZREMRANGEBYSCORE", KEYS[k], "-inf", "(" .. cutms)
  redis.call("PEXPIRE", KEYS[k], ret)
end
for k = 4, 5 do
  redis.call("ZADD", KEYS[k], nowus, member)
  redis.call("ZREMRANGEBYSCORE", KEYS[k], "-inf", "(" .. cutus)
  redis.call("PEXPIRE", KEYS[k], ret)
end
return 1
