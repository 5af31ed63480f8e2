-- Returns the run id of the Redis process that runs it, as the scripts
-- that sell read it (see grab.lua): '-' from a server that does not tell
-- it, where a restart or a failover to an older state cannot be noticed.
--
-- KEYS: none
-- ARGV: none
--
-- Returns: the run id, or '-'.

return ${serverRun}
