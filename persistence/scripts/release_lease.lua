-- Drops our lease, and never another process's.
--
-- KEYS[1] -> the lease: a lease prefix + the consumer name
-- ARGV[1] -> our value
--
-- Returns: 1 if it dropped the lease, 0 if the lease was not ours.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
