-- Removes a voucher's load from Redis if Redis still holds that load (by
-- its load stamp), and announces it so that actors re-activate and load
-- the voucher again: a load whose stamp the database never recorded could
-- not tell the orders the writer did not count from those it did.
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:stock
-- KEYS[3] -> {v<ID>}:users
-- ARGV[1] -> load stamp
--
-- Returns: 1 if it removed the load, 0 if Redis holds another one or none.

if redis.call('HGET', KEYS[1], '${metaLoadStamp}') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('PUBLISH', '${eventsChannel}', KEYS[1])
return 1
