-- rate.lua: one call against a token bucket, fleet-wide (GCRA: the bucket
-- is the "theoretical arrival time" of the next call; no refill loop).
-- The clock is the Redis server's, so workers' clocks never disagree.
--
-- KEYS[1]  the bucket: <prefix><grant>/<tenant>
-- ARGV[1]  the interval between calls at the rate, in microseconds
-- ARGV[2]  the burst
--
-- Returns {1, 0} when the call fits (and takes its place in the bucket),
-- {0, microseconds until it would fit} when it does not.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call("GET", KEYS[1]) or now)
if tat < now then
  tat = now
end
local fits_at = tat - (burst - 1) * interval
if now < fits_at then
  return {0, fits_at - now}
end
tat = tat + interval
-- The key outlives the bucket's refill by a millisecond at most.
redis.call("SET", KEYS[1], string.format("%.0f", tat), "PX", math.ceil((tat - now) / 1000) + 1)
return {1, 0}
