-- Tells whether no grab of a red packet can still reach the database, so
-- that its refund may count the grabs there. That is when, by Redis's
-- clock:
--   - the red packet has expired (no grab appends to its log any more) and
--     no reload holds its grabs (meta hold: a writer may still hold grabs
--     of the load Redis lost, see RedPacketStore.Load);
--   - or Redis lacks it (lost with Redis's data, or never loaded) and has
--     lacked it for the hold (ARGV[1] ms, from the first call that found it
--     missing, recorded in the settle key): a writer may hold grabs it read
--     from a log Redis lost; it retries, and registers among the holders,
--     within the hold;
--   - and its order log is empty (every grab that Redis still knows of is
--     committed) and no writer claims to hold grabs of it (holders with a
--     score in the future: a writer retrying against a database it cannot
--     reach, see hold_grabs.lua).
--
-- KEYS[1] -> {rp<ID>}:meta
-- KEYS[2] -> {rp<ID>}:log
-- KEYS[3] -> {rp<ID>}:settle
-- KEYS[4] -> {rp<ID>}:holders
-- ARGV[1] -> the hold, ms
-- ARGV[2] -> how long the settle key lives, ms
--
-- Returns: 1 if settled, 0 if the refund must wait.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KEYS[1], 'expire', 'hold')
local expire = tonumber(m[1] or '')
if expire then
  if now < expire or now < tonumber(m[2] or '0') then return 0 end
else
  local wait = tonumber(redis.call('GET', KEYS[3]) or '')
  if not wait then
    redis.call('SET', KEYS[3], string.format('%.0f', now + tonumber(ARGV[1])), 'PX', ARGV[2])
    return 0
  end
  if now < wait then return 0 end
end
if redis.call('XLEN', KEYS[2]) > 0 then return 0 end
if redis.call('ZCOUNT', KEYS[4], '(' .. string.format('%.0f', now), '+inf') > 0 then return 0 end
return 1
