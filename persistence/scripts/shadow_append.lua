-- Appends orders a node answered OK back to the voucher's order log, when
-- the entries that held them may be gone (SoldShadow): Redis lost the load
-- they were sold from (a flush, a restart without its files, a promoted
-- replica that lacked them) or the log itself. Each entry keeps the load
-- stamp it was sold under, so the order writer returns an order of a lost
-- load to the reloaded stock (adopt_orders.lua) while the reload holds its
-- sales; an order that was stored already is a no-op to the writer. Only
-- while Redis holds the load the caller saw, so that it never races a
-- reload.
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:log
-- ARGV[1] -> the load stamp the caller saw Redis hold
-- ARGV[2] -> how many fields each entry has (n)
-- ARGV[3..] -> the entries, n fields (name, value, ...) each
--
-- Returns: the id of the last entry appended, or '' when Redis holds
-- another load (nothing appended).

if (redis.call('HGET', KEYS[1], '${metaLoadStamp}') or '') ~= ARGV[1] then
  return ''
end
redis.pcall('XGROUP', 'CREATE', KEYS[2], '${OrderLogGroup}', '0', 'MKSTREAM')
local n = tonumber(ARGV[2])
local last = ''
for i = 3, #ARGV, n do
  last = redis.call('XADD', KEYS[2], '*', unpack(ARGV, i, i + n - 1))
end
return last
