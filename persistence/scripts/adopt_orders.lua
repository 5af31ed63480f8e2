-- Puts orders that a reload of the voucher's stock could not count back
-- into Redis: orders sold from an earlier load that were in no order log
-- when the reload ran, because an order writer was holding them in an
-- attempt to commit (see Stock.Preheat, which counts those still in the
-- log). It takes their units off the stock, counts them for their users
-- and remembers their request ids, once per order (the adopted set makes a
-- replayed batch a no-op), and only
--   - while Redis holds the load the database recorded; any other load is
--     one whose stamp never got recorded (its transaction failed), and is
--     removed so that the next activation reloads from the database, which
--     holds these orders once this transaction commits;
--   - while the reload still holds its sales (meta hold, Redis time), so no
--     unit of these orders can have been sold again; later, they are
--     refused, never sold twice;
--   - if the stock covers them all.
-- It announces the voucher when it removed a load or adopted orders.
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:stock
-- KEYS[3] -> {v<ID>}:users
-- KEYS[4] -> {v<ID>}:adopted
-- KEYS[5] -> {v<ID>}:req
-- ARGV[1] -> the load stamp the database recorded
-- ARGV[2], ARGV[3], ARGV[4] -> order id, user id, request id (or '') of the
--            first order; the same three for each further order
--
-- Returns: {n}, n >= 0 the orders adopted now (0: all were adopted
-- before); {-1} Redis held another load (then removed) or none; {-2} the
-- hold is over; {-3} the stock does not cover them.

if redis.call('HGET', KEYS[1], '${metaLoadStamp}') ~= ARGV[1] then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
    redis.call('PUBLISH', '${eventsChannel}', KEYS[1])
  end
  return {-1}
end
local fresh = {}
for i = 2, #ARGV, 3 do
  if redis.call('SISMEMBER', KEYS[4], ARGV[i]) == 0 then
    fresh[#fresh + 1] = i
  end
end
if #fresh == 0 then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(redis.call('HGET', KEYS[1], 'hold') or '0') then
  return {-2}
end
if tonumber(redis.call('GET', KEYS[2]) or '0') < #fresh then
  return {-3}
end
for _, i in ipairs(fresh) do
  redis.call('SADD', KEYS[4], ARGV[i])
  redis.call('HINCRBY', KEYS[3], ARGV[i + 1], 1)
  if ARGV[i + 2] ~= '' then
    redis.call('HSET', KEYS[5], ARGV[i + 2], ARGV[i])
  end
end
redis.call('DECRBY', KEYS[2], #fresh)
local expire = redis.call('HGET', KEYS[1], 'expire')
if expire then
  redis.call('PEXPIREAT', KEYS[4], expire)
end
redis.call('PUBLISH', '${eventsChannel}', KEYS[1])
return {#fresh}
