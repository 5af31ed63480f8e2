-- Reads what a node needs to know about the orders it answered OK and
-- keeps (SoldShadow): the load Redis holds of the voucher, and how far the
-- order writers have read the voucher's order log.
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:log
-- ARGV: none
--
-- Returns: {load stamp or '', last delivered id or '', first entry id or
-- ''}; '' for the delivered id when the log or its consumer group is
-- missing (flushed, or deleted); '' for the first entry when the log holds
-- none (entries are deleted once stored, see ack.lua).

local stamp = redis.call('HGET', KEYS[1], '${metaLoadStamp}') or ''
local head = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
local first = ''
if head[1] then
  first = head[1][1]
end
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[2])
if type(groups) ~= 'table' or groups.err then
  return {stamp, '', first}
end
for _, g in ipairs(groups) do
  local name, last
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] end
    if g[i] == 'last-delivered-id' then last = g[i + 1] end
  end
  if name == '${OrderLogGroup}' then
    return {stamp, last or '', first}
  end
end
return {stamp, '', first}
