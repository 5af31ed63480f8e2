-- Deletes the consumers of a log's group that hold no pending entry and
-- have been idle longer than the bound, except the caller. The check and
-- the deletion are one script: a consumer that read entries in between
-- would have them dropped from the group's pending list by DELCONSUMER,
-- and nobody could claim them any more. Entries a dead consumer left
-- pending are first claimed by a live one after ClaimIdle; the consumer is
-- deleted in a later pass.
--
-- KEYS[1] -> the log
-- ARGV[1] -> the caller's consumer name
-- ARGV[2] -> the idle bound, ms
-- ARGV[3] -> the consumer group
--
-- Returns: how many consumers it deleted (0 for a log without the group).

local cs = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[3])
if type(cs) ~= 'table' or cs.err then return 0 end
local n = 0
for _, c in ipairs(cs) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[1] and tonumber(f['pending']) == 0 and tonumber(f['idle']) > tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[3], f['name'])
    n = n + 1
  end
end
return n
