-- Changes the status of a preheated voucher unless a newer version is
-- already there, and does nothing for one that is not in Redis (the next
-- preheat copies it). It announces the change so that actors caching the
-- old status reload.
--
-- KEYS[1] -> {v<ID>}:meta
-- ARGV[1] -> status
-- ARGV[2] -> version: the row's update time, unix µs
--
-- Returns: 1 if it changed the status, 0 if not.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if tonumber(ARGV[2]) < tonumber(redis.call('HGET', KEYS[1], 'ver') or '-1') then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'ver', ARGV[2])
redis.call('PUBLISH', '${eventsChannel}', KEYS[1])
return 1
