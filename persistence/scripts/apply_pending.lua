-- Applies stock changes the database committed (see tb_stock_pending) to a
-- voucher's Redis load, each at most once: a change already in the applied
-- set, or one made under another load than Redis holds (a reload after the
-- commit read it from the database already), or for a voucher Redis does
-- not hold, is skipped. A returned order gives back its unit and its
-- user's slot; a restock adds its units and raises the metadata's initial
-- stock to the database's figure. It announces the voucher so that every
-- node's actor reloads: a sold-out voucher sells again.
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:stock
-- KEYS[3] -> {v<ID>}:users
-- KEYS[4] -> {v<ID>}:applied
-- ARGV[1..5] -> member of the applied set (pendingMember), load stamp the
--               change was made under, stock delta, user id or '', initial
--               stock or '0', of the first change; the same five for each
--               further change
--
-- Returns: {applied, skipped}.

local life = redis.call('HGET', KEYS[1], '${metaLoadStamp}')
local applied, skipped, total = 0, 0, 0
for i = 1, #ARGV, 5 do
  local member, stamp, delta, user, initial = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], tonumber(ARGV[i + 4])
  if (not life) or life ~= stamp or redis.call('SISMEMBER', KEYS[4], member) == 1 then
    skipped = skipped + 1
  else
    redis.call('SADD', KEYS[4], member)
    total = total + delta
    if user ~= '' and tonumber(redis.call('HGET', KEYS[3], user) or '0') > 0 then
      redis.call('HINCRBY', KEYS[3], user, -1)
    end
    if initial > tonumber(redis.call('HGET', KEYS[1], 'initial') or '0') then
      redis.call('HSET', KEYS[1], 'initial', ARGV[i + 4])
    end
    applied = applied + 1
  end
end
if total > 0 then
  redis.call('INCRBY', KEYS[2], total)
end
if applied > 0 then
  local expire = redis.call('HGET', KEYS[1], 'expire')
  if expire then
    redis.call('PEXPIREAT', KEYS[4], expire)
  end
  redis.call('PUBLISH', '${eventsChannel}', KEYS[1])
end
return {applied, skipped}
