-- Unregisters an order log only if its generation is still the one the
-- caller read before it found the log finished: a log registered again
-- meanwhile (its voucher preheated again) stays.
--
-- KEYS[1] -> flashsale:order-logs, the registry (a set)
-- KEYS[2] -> {flashsale:order-logs}:gens, log -> generation
-- ARGV[1] -> the order log's key
-- ARGV[2] -> the generation the caller read ('' for a log registered
--            without one)
--
-- Returns: 1 if it unregistered the log, 0 if not.

local g = redis.call('HGET', KEYS[2], ARGV[1]) or ''
if g ~= ARGV[2] then return 0 end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
