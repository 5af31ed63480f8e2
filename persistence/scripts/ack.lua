-- Acknowledges and deletes entries of one log atomically, so that no entry
-- can stay in the log once acknowledged: a log holds exactly the entries
-- not yet handled (reconciliation counts them).
--
-- KEYS[1] -> the log
-- ARGV[1] -> its consumer group
-- ARGV[2..] -> entry ids
--
-- Returns: how many entries it deleted.

redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
