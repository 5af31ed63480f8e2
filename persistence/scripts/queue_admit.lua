-- Admits the head of a voucher's waiting room at the shop's pace, in one
-- atomic step: tickets past their expiry free their slots first; then as
-- many users as the token bucket (qmRate a second, holding at most one
-- second's worth), the open tickets allowed (qmMax) and the stock left
-- (one open ticket per unit not yet sold) allow, in order, leave the line
-- with a ticket valid until now + ARGV[1]. Nothing is admitted before the
-- opening, after the end, or while paused, and the bucket does not fill
-- meanwhile. Every node may run it: the bucket and the line live here,
-- so two pacers never admit more than one would.
--
-- A room whose state was written on another Redis process is dropped
-- first, or kept where its writes are acknowledged (ARGV[3]), as in
-- queue_join.lua.
--
-- KEYS[1] -> {v<ID>}:qm
-- KEYS[2] -> {v<ID>}:q
-- KEYS[3] -> {v<ID>}:qa
-- KEYS[4] -> {v<ID>}:qx
-- KEYS[5] -> {v<ID>}:stock
-- ARGV[1] -> a ticket's lifetime, ms
-- ARGV[2] -> the most users admitted by this call
-- ARGV[3] -> '1' when the room's writes are acknowledged by replicas
--
-- Returns: {code, expired, reset, now (unix ms), waiting (after this
-- run), then for each user
-- admitted: user id, their order (an early one's is below 1, a later
-- one's is when they joined, unix µs)}; code 0 ran, 2 no room here
-- (nothing follows code), 4 Redis evicts keys.

local run = ${serverRun}
if string.sub(run, 1, 1) == '!' then
  return {4}
end
local m = redis.call('HMGET', KEYS[1], '${qmOpen}', '${qmEnd}', '${qmRun}', '${qmRate}', '${qmMax}', '${qmPaused}', '${qmTokens}', '${qmLast}', '${qmExpire}')
if not m[1] then
  return {2}
end
local reset = 0
if m[3] ~= run then
  if ARGV[3] == '1' then
    redis.call('HSET', KEYS[1], '${qmRun}', run)
  else
    ${roomReset}
    m[7], m[8] = false, false
    reset = 1
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if expired > 0 then
  redis.call('HINCRBY', KEYS[1], '${qmExpired}', expired)
end
local out = {0, expired, reset, tostring(now), 0}
local open, finish = tonumber(m[1]), tonumber(m[2])
local rate, max = tonumber(m[4] or '0'), tonumber(m[5] or '0')
if now < open or now >= finish or m[6] == '1' or rate <= 0 then
  -- The bucket does not fill while the room admits nobody.
  redis.call('HSET', KEYS[1], '${qmLast}', now)
  out[5] = redis.call('ZCARD', KEYS[2])
  return out
end
local tokens = tonumber(m[7] or '0')
local last = math.max(tonumber(m[8] or m[1]), open)
tokens = math.min(rate, tokens + rate * math.max(now - last, 0) / 1000)
local active = redis.call('ZCARD', KEYS[3])
local left = tonumber(redis.call('GET', KEYS[5]) or '0')
local n = math.floor(math.min(tokens, max - active, left - active, tonumber(ARGV[2])))
if n > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[2], n)
  local expiry = now + tonumber(ARGV[1])
  local got = 0
  for i = 1, #popped, 2 do
    local user = popped[i]
    redis.call('HSET', KEYS[4], user, expiry)
    redis.call('ZADD', KEYS[3], expiry, user)
    out[#out + 1] = user
    out[#out + 1] = popped[i + 1]
    got = got + 1
  end
  tokens = tokens - got
  redis.call('HINCRBY', KEYS[1], '${qmAdmitted}', got)
  if m[9] then
    redis.call('PEXPIREAT', KEYS[3], m[9])
    redis.call('PEXPIREAT', KEYS[4], m[9])
  end
end
redis.call('HSET', KEYS[1], '${qmTokens}', string.format('%.6f', tokens), '${qmLast}', now)
out[5] = redis.call('ZCARD', KEYS[2])
return out
