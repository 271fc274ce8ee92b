-- The summaries changed at or after a time, oldest change first (index.go).
-- KEYS: 1 the by-update zset. ARGV: 1 prefix of the job hashes, 2 since
-- (µs), 3 limit, then the hash fields to return. Entries changed in the
-- same microsecond as the last one are returned too (at most 100 more), so
-- that a caller resuming from the last change's time misses none.
local prefix, since, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
local zs = redis.call("ZRANGEBYSCORE", KEYS[1], since, "+inf", "WITHSCORES", "LIMIT", 0, limit + 100)
local rows = {}
local last = nil
for j = 1, #zs, 2 do
  local m, s = zs[j], tonumber(zs[j + 1])
  if #rows >= limit and s ~= last then break end
  local r = redis.call("HMGET", prefix .. m, unpack(fields))
  if r[1] then
    rows[#rows + 1] = r
  end
  last = s
end
return rows
