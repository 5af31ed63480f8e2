-- Takes a consumer name's lease if it is free or still holds the value the
-- caller saw (its holder is known to be dead).
--
-- KEYS[1] -> the lease: a lease prefix + the consumer name
-- ARGV[1] -> the new value (host, pid, random token)
-- ARGV[2] -> ttl, ms
-- ARGV[3] -> the value seen ('' = free)
--
-- Returns: 1 if it took the lease, 0 if not.

local v = redis.call('GET', KEYS[1]) or ''
if v ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
