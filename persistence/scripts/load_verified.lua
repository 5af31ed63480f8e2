-- Tells whether Redis holds a load of a voucher or a red packet, and
-- whether that load was verified on this very Redis process (its metadata's
-- metaRun is the server's run id; see grab.lua). A loader runs it under
-- WATCH of the metadata, on the connection of its transaction, so that
-- what it answers holds until the transaction's EXEC.
--
-- KEYS[1] -> the metadata hash ({rp<ID>}:meta)
-- ARGV: none
--
-- Returns: 0 no load, 1 a verified load, 2 a load not verified on this
-- server (Redis restarted or failed over since it was written, or
-- evicted keys since), 3 Redis's maxmemory-policy evicts keys: nothing
-- may be loaded.

local run = ${serverRun}
if string.sub(run, 1, 1) == '!' then
  return 3
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('HGET', KEYS[1], '${metaRun}') == run then
  return 1
end
return 2
