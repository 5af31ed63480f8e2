-- Reads where a user stands in a voucher's waiting room, and the room's
-- counters, in one step. Writes nothing, but with ARGV[3] '1' rewrites an
-- admission it shows, as it is, so that a WAIT after it proves the
-- replicas hold the admission (see Queue.Place). A room whose state was written
-- on another Redis process (qmRun, see queue_join.lua) holds no place: the
-- next join or admission drops it; unless the room's writes are
-- acknowledged by replicas (ARGV[2]), which keeps it.
--
-- KEYS[1] -> {v<ID>}:qm
-- KEYS[2] -> {v<ID>}:q
-- KEYS[3] -> {v<ID>}:qx
-- KEYS[4] -> {v<ID>}:stock
-- ARGV[1] -> user id ('' for the room's counters alone)
-- ARGV[2] -> '1' when the room's writes are acknowledged by replicas
-- ARGV[3] -> '1' to rewrite the user's admission (for a WAIT)
--
-- Returns: {found, now (unix ms), open, end, waiting, admitted so far,
-- stock left ('' when Redis holds none), joined (0/1), rank among the
-- waiting (0-based, -1 when not waiting), ticket expiry (unix ms, '' when
-- not admitted), rate, max, paused}; found is 0 (and nothing follows) when
-- the voucher has no room in this Redis or its state is stale.

local run = ${serverRun}
local m = redis.call('HMGET', KEYS[1], '${qmOpen}', '${qmEnd}', '${qmRun}', '${qmAdmitted}', '${qmRate}', '${qmMax}', '${qmPaused}')
if not m[1] or m[3] ~= run and ARGV[2] ~= '1' then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local user = ARGV[1]
local joined, rank, expiry = 0, -1, ''
if user ~= '' then
  rank = redis.call('ZRANK', KEYS[2], user) or -1
  expiry = redis.call('HGET', KEYS[3], user) or ''
  if rank >= 0 or expiry ~= '' then
    joined = 1
  end
  if expiry ~= '' and ARGV[3] == '1' then
    -- no rewrite
  end
end
return {1, tostring(now), m[1], m[2], redis.call('ZCARD', KEYS[2]), m[4] or '0',
  redis.call('GET', KEYS[4]) or '', joined, rank, expiry, m[5] or '0', m[6] or '0', m[7] or '0'}
