-- Reads, in one atomic step, what Redis holds of a voucher: its load
-- stamp, its stock, its users' marks, the orders of its order log, and
-- which of the given pending stock changes it applied already. The
-- reconciler compares them with the database under the voucher's row lock.
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:stock
-- KEYS[3] -> {v<ID>}:users
-- KEYS[4] -> {v<ID>}:log
-- KEYS[5] -> {v<ID>}:applied
-- ARGV[1..] -> members of the applied set to test (pendingMember)
--
-- Returns: {load stamp or false, stock or false, {user, count, ...},
-- {order, user, ...} of the log's entries, {1 or 0 per ARGV}}.

local entries = {}
for _, e in ipairs(redis.call('XRANGE', KEYS[4], '-', '+')) do
  local f = e[2]
  local o, u
  for i = 1, #f, 2 do
    if f[i] == '${EntryOrderID}' then o = f[i + 1] elseif f[i] == '${EntryUserID}' then u = f[i + 1] end
  end
  if o and u then
    entries[#entries + 1] = o
    entries[#entries + 1] = u
  end
end
local applied = {}
for i = 1, #ARGV do
  applied[i] = redis.call('SISMEMBER', KEYS[5], ARGV[i])
end
return {redis.call('HGET', KEYS[1], '${metaLoadStamp}'), redis.call('GET', KEYS[2]), redis.call('HGETALL', KEYS[3]), entries, applied}
