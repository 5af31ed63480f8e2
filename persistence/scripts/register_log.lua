-- Registers an order log under a new generation, so that a writer's prune
-- can tell that the log was registered again while it looked. The
-- generation is stored as the string GET returns, never as a Lua number
-- (see "Clocks, versions, and no Lua number written back" in docs/DECISIONS.md).
--
-- KEYS[1] -> flashsale:order-logs, the registry (a set)
-- KEYS[2] -> {flashsale:order-logs}:gens, log -> generation
-- KEYS[3] -> {flashsale:order-logs}:gen, the generations' counter
-- ARGV[1] -> the order log's key
--
-- Returns: 1.

redis.call('INCR', KEYS[3])
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], redis.call('GET', KEYS[3]))
return 1
