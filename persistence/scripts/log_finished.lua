-- Tells whether an order log is finished: its voucher's sale ended more
-- than a minute ago by Redis's clock (so no grab can append to it any
-- more, even from a node whose clock lags) and it holds no entry. A
-- voucher Redis no longer knows counts as ended.
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:log
-- ARGV: none
--
-- Returns: 1 when finished, 0 when not.

local e = tonumber(redis.call('HGET', KEYS[1], 'end') or '0')
local t = redis.call('TIME')
if tonumber(t[1]) * 1000 < e + 60000 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('XLEN', KEYS[2]) > 0 then return 0 end
return 1
