-- Returns the token a load is verified under, as the scripts that sell
-- read it (see grab.lua and serverRunLua in scripts.go): the run id of the
-- Redis process that runs it, with the count of keys it evicted when there
-- are any ("<run id>/<evicted>"); '!<policy>' while its maxmemory-policy
-- evicts keys; '-' from a server that does not tell its run id, where a
-- restart or a failover to an older state cannot be noticed.
--
-- KEYS: none
-- ARGV: none
--
-- Returns: the token.

return ${serverRun}
