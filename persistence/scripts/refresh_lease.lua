-- Extends our lease, or takes it again if it lapsed (Redis restarted, or a
-- refresh came late); it fails only if another process holds the name.
--
-- KEYS[1] -> the lease: a lease prefix + the consumer name
-- ARGV[1] -> our value
-- ARGV[2] -> ttl, ms
--
-- Returns: 1 if the lease is ours, 0 if another process holds it.

local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
