-- One page of the job index, newest queued first (index.go).
-- KEYS: 1 the by-queued zset (a tenant's, or the fleet's).
-- ARGV: 1 prefix of the job hashes, 2 max score ("+inf" or the cursor's),
-- 3 the cursor's member ("" for none), 4 budget (entries scanned at most),
-- 5 limit, 6 state, 7 reason, 8 queue, 9 label key, 10 label value,
-- 11 "1" when the label needs only its key, 12 id prefix, then the hash
-- fields to return.
-- Returns {rows, next score, next member}: the next pair is empty when the
-- scan reached the end of the set.
local prefix, maxs, cm = ARGV[1], ARGV[2], ARGV[3]
local budget, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
local fstate, freason, fqueue = ARGV[6], ARGV[7], ARGV[8]
local lkey, lval, lany, idp = ARGV[9], ARGV[10], ARGV[11] == "1", ARGV[12]
local fields = {}
for i = 13, #ARGV do fields[#fields + 1] = ARGV[i] end
local maxn = tonumber(maxs)
local rows, scanned, offset = {}, 0, 0
local lastS, lastM = "", ""
local batch = math.min(math.max(limit * 2, 100), 1000)
while scanned < budget do
  local want = math.min(batch, budget - scanned)
  local zs = redis.call("ZREVRANGEBYSCORE", KEYS[1], maxs, "-inf", "WITHSCORES", "LIMIT", offset, want)
  if #zs == 0 then
    return {rows, "", ""}
  end
  offset = offset + #zs / 2
  for j = 1, #zs, 2 do
    local m, s = zs[j], zs[j + 1]
    if not (cm ~= "" and tonumber(s) == maxn and m >= cm) then
      scanned = scanned + 1
      lastS, lastM = s, m
      local h = redis.call("HMGET", prefix .. m, "state", "reason", "queue", "id", "labels")
      local ok = h[1] ~= false or h[4] ~= false
      local state = h[1] or "queued"
      if ok and fstate ~= "" and state ~= fstate then ok = false end
      if ok and freason ~= "" and h[2] ~= freason then ok = false end
      if ok and fqueue ~= "" and h[3] ~= fqueue then ok = false end
      if ok and idp ~= "" and (not h[4] or string.sub(h[4], 1, #idp) ~= idp) then ok = false end
      if ok and lkey ~= "" then
        local labels = h[5] and cjson.decode(h[5]) or {}
        local v = labels[lkey]
        if v == nil or (not lany and v ~= lval) then ok = false end
      end
      if ok then
        rows[#rows + 1] = redis.call("HMGET", prefix .. m, unpack(fields))
        if #rows >= limit then
          return {rows, lastS, lastM}
        end
      end
    end
  end
  if #zs / 2 < want then
    return {rows, "", ""}
  end
end
return {rows, lastS, lastM}
