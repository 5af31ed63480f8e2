-- Writes a voucher's metadata and, only when Redis holds no verified load
-- (the stock key is absent, or the load was not verified on this Redis
-- process: metaRun differs from the server's run id, see grab.lua), a
-- whole load: stock, per-user marks, request ids and the ids of orders
-- already counted (the adopted set). Running it again never resets stock
-- that grabs have already taken. Metadata carries a version (the row's
-- update time): an older version never overwrites a newer one, so a
-- start-up preheat that read the row before an admin paused the voucher
-- cannot resume it in Redis.
--
-- It also creates the order log's consumer group (from the start of the
-- order log, so no order is ever appended before a group can see it) and
-- announces the voucher on the events channel so actors reload it.
--
-- Every value is passed as a string from Go and written as is: Lua numbers
-- written back to Redis risk float formatting.
--
-- A load that writes the stock stamps the metadata with its load stamp (a
-- random string from the caller), which every order sold from this load
-- carries into the order log (see Vouchers.Preload and the OrderWriter),
-- with the run id of this server (metaRun), and, for a reload, with the Redis time until which it holds its sales
-- (see Stock.ReloadHold).
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:stock
-- KEYS[3] -> {v<ID>}:users
-- KEYS[4] -> {v<ID>}:log
-- KEYS[5] -> {v<ID>}:req
-- KEYS[6] -> {v<ID>}:adopted
-- ARGV[1] -> status
-- ARGV[2] -> begin, unix ms
-- ARGV[3] -> end, unix ms
-- ARGV[4] -> per-user limit
-- ARGV[5] -> initial stock
-- ARGV[6] -> version: the row's update time, unix µs
-- ARGV[7] -> when the request ids and the adopted set expire, unix ms
-- ARGV[8] -> stock
-- ARGV[9] -> load stamp
-- ARGV[10] -> how long a reload holds its sales, ms (0: no hold)
-- ARGV[11] -> 'meta' to refresh the metadata only, 'resync' to replace a
--             stale load, '' to write a load unless Redis has one
-- ARGV[12] -> segments
-- ARGV[13] -> n, the number of users; then n (user id, live orders) pairs,
--             then m, the number of requests, and m (request id, order id)
--             pairs; the rest are ids of orders counted already. Absent
--             for 'meta'.
--
-- Returns: 1 when it wrote the load, 0 when Redis had a verified one, 2
-- when a 'meta' call found no stock, 3 when it found a load not verified
-- on this server (the caller then sends the load), 4 when Redis's
-- maxmemory-policy evicts keys (nothing written: no load is verified
-- under it, see grab.lua).

local run = ${serverRun}
if string.sub(run, 1, 1) == '!' then
  return 4
end
local cur = tonumber(redis.call('HGET', KEYS[1], 'ver') or '-1')
if tonumber(ARGV[6]) >= cur then
  redis.call('HSET', KEYS[1], 'status', ARGV[1], 'begin', ARGV[2], 'end', ARGV[3], 'limit', ARGV[4],
    'initial', ARGV[5], 'ver', ARGV[6], 'expire', ARGV[7], 'segs', ARGV[12])
end
redis.pcall('XGROUP', 'CREATE', KEYS[4], '${OrderLogGroup}', '0', 'MKSTREAM')
redis.call('PUBLISH', '${eventsChannel}', KEYS[1])
local held = redis.call('EXISTS', KEYS[2]) == 1
local verified = held and redis.call('HGET', KEYS[1], '${metaRun}') == run
if verified and ARGV[11] ~= 'resync' then
  return 0
end
if ARGV[11] == 'meta' then
  if held then
    return 3
  end
  return 2
end
redis.call('DEL', KEYS[3], KEYS[5], KEYS[6])
local i = 14
for _ = 1, tonumber(ARGV[13]) do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local nreq = tonumber(ARGV[i])
i = i + 1
for _ = 1, nreq do
  redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for k = i, #ARGV do
  redis.call('SADD', KEYS[6], ARGV[k])
end
for _, k in ipairs({KEYS[5], KEYS[6]}) do
  if redis.call('EXISTS', k) == 1 then
    redis.call('PEXPIREAT', k, ARGV[7])
  end
end
redis.call('SET', KEYS[2], ARGV[8])
redis.call('HSET', KEYS[1], '${metaLoadStamp}', ARGV[9], '${metaRun}', run)
if tonumber(ARGV[10]) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'hold', string.format('%.0f', now + tonumber(ARGV[10])))
else
  redis.call('HDEL', KEYS[1], 'hold')
end
return 1
