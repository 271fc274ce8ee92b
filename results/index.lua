-- Updates one job's entry in the job index (index.go).
-- KEYS: 1 the job's hash, 2 the tenant's by-queued zset, 3 the fleet's
-- by-queued zset, 4 the tenant's by-update zset, 5 the fleet's by-update
-- zset, 6 the fleet's reason counts of the current 5-minute bucket, 7 the
-- tenant's trim marker.
-- ARGV: 1 mode (queued | running | final), 2 member (tenant/id),
-- 3 retention in ms, 4 queued score in ms (when the hash has none yet),
-- 5 n: the number of state field/value pairs that follow, then those
-- pairs, then static field/value pairs.
-- A terminal entry never changes again (the stored result is immutable),
-- and a queued write never takes a running job back to queued.
-- Returns 1 when the entry changed, 0 when it was left as it was.
--
-- It runs on every job's queue, start and end, so it costs few commands:
-- one HMGET reads what the write depends on, one HSET writes every field,
-- the by-queued zsets are written only for a new entry, and the zsets are
-- trimmed and given their TTL by a final write, at most once a second per
-- tenant (the trim marker), with a TTL a second past the retention so that
-- they outlive every entry written before the next trim. Every entry ends
-- in a final write, so a by-update set a queued or running write created
-- gets its TTL by then: from that write's trim, or from the trim that set
-- the marker after it. (A by-update set is never emptied by a trim: the
-- write that trims has just added to it.)
local mode, member = ARGV[1], ARGV[2]
local ret = tonumber(ARGV[3])
local terminal = {succeeded = true, failed = true, rejected = true, canceled = true, infra = true}
local h = redis.call("HMGET", KEYS[1], "state", "q", "cmd", "st", "reason", "runs")
local cur, has = h[1], {q = h[2], cmd = h[3], st = h[4]}
if cur and terminal[cur] then
  return 0
end
local t = redis.call("TIME")
local nowus = t[1] .. string.format("%06d", tonumber(t[2]))
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local set = {}
local reason = h[5]
local function put(f, v)
  set[#set + 1] = f
  set[#set + 1] = v
  if f == "reason" then reason = v end
end
local n = tonumber(ARGV[5])
local applyState = not (mode == "queued" and cur == "running")
local i = 6
for k = 1, n do
  if applyState then put(ARGV[i], ARGV[i + 1]) end
  i = i + 2
end
while i < #ARGV do
  local f, v = ARGV[i], ARGV[i + 1]
  if f == "q" or f == "cmd" or f == "st" then
    if not has[f] then
      put(f, v)
      has[f] = v
    end
  elseif v ~= "" then
    put(f, v)
  end
  i = i + 2
end
if mode == "running" then
  put("st", string.format("%d", nowms))
  put("runs", tostring((tonumber(h[6]) or 0) + 1))
end
local q = has.q
local new = not q
if new then
  q = ARGV[4]
  put("q", q)
end
put("up", nowus)
redis.call("HSET", KEYS[1], unpack(set))
if mode ~= "running" or new then
  -- The queued write gave the entry the retention, and the final write
  -- gives it again from the job's end; a start (under the job timeout
  -- after its queue) needs none.
  redis.call("PEXPIRE", KEYS[1], ret)
end
if mode == "final" and reason then
  if redis.call("HINCRBY", KEYS[6], reason, 1) == 1 then
    redis.call("PEXPIRE", KEYS[6], 7200000) -- the bucket's first count of this reason
  end
end
if new and tonumber(q) >= nowms - ret then
  -- A trim may have emptied (deleted) a by-queued set while the marker
  -- still stands, so a set written here gets its TTL here. An entry queued
  -- before the retention is not listed at all.
  for k = 2, 3 do
    redis.call("ZADD", KEYS[k], "NX", q, member)
    redis.call("PEXPIRE", KEYS[k], ret + 1000)
  end
end
redis.call("ZADD", KEYS[4], nowus, member)
redis.call("ZADD", KEYS[5], nowus, member)
if mode == "final" and redis.call("SET", KEYS[7], "1", "NX", "PX", math.max(1, math.min(1000, math.floor(ret / 2)))) then
  local cutms = string.format("%d", nowms - ret)
  local cutus = string.format("%d", (nowms - ret) * 1000)
  for k = 2, 5 do
    redis.call("ZREMRANGEBYSCORE", KEYS[k], "-inf", "(" .. (k <= 3 and cutms or cutus))
    redis.call("PEXPIRE", KEYS[k], ret + 1000)
  end
end
return 1
