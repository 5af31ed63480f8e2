-- Puts a user in a voucher's waiting room, once: a user who joined before
-- (waiting, or admitted since) keeps the place they have, and nothing is
-- written. Before the room opens (qmOpen, unix ms by Redis TIME) a user
-- joins early: their order is a random number in [0, 1) the caller drew,
-- so that the early ones stand in a uniformly random order at the opening,
-- whenever each of them came. From the opening on a user goes to the back:
-- their order is their arrival time in µs, after every early one. The
-- order is all Redis keeps of a waiting user (about 125 bytes): when a
-- later one joined is their order, and an early one waits from the
-- opening.
--
-- The room's state is trusted only on the Redis process it was written
-- on (qmRun, the token a voucher's load is verified under, see grab.lua):
-- on another (a restart from older files, a promoted replica, a flush)
-- the places, admissions and counters are dropped first, as a load is
-- rebuilt; the settings stay. The caller learns it (reset = 1). Where
-- every join and admission waited for the replicas (ARGV[3] = '1',
-- REDIS_ACK_REPLICAS), a promoted replica holds every one answered: the
-- state is kept and stamped with this server's token instead.
--
-- KEYS[1] -> {v<ID>}:qm   hash: the room's settings and counters
-- KEYS[2] -> {v<ID>}:q    zset: waiting users by their order
-- KEYS[3] -> {v<ID>}:qa   zset: admitted users with an open ticket, by its expiry (ms)
-- KEYS[4] -> {v<ID>}:qx   hash: user -> their ticket's expiry (unix ms)
-- ARGV[1] -> user id
-- ARGV[2] -> the user's order if they join early: a number in [0, 1)
-- ARGV[3] -> '1' when the room's writes are acknowledged by replicas
--
-- Returns: {code, reset} with code 0 joined now, 1 joined before, 2 the
-- voucher has no waiting room in this Redis (not configured, or lost with
-- its load: the caller configures it and asks again), 3 the room is
-- closed (the sale ended), 4 Redis evicts keys (nothing written).

local run = ${serverRun}
if string.sub(run, 1, 1) == '!' then
  return {4, 0}
end
local m = redis.call('HMGET', KEYS[1], '${qmOpen}', '${qmEnd}', '${qmRun}', '${qmExpire}')
if not m[1] then
  return {2, 0}
end
local reset = 0
if m[3] ~= run then
  if ARGV[3] == '1' then
    redis.call('HSET', KEYS[1], '${qmRun}', run)
  else
    ${roomReset}
    reset = 1
  end
end
local user = ARGV[1]
if redis.call('ZSCORE', KEYS[2], user) or redis.call('HEXISTS', KEYS[4], user) == 1 then
  return {1, reset}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= tonumber(m[2]) then
  return {3, reset}
end
local us = t[1] .. string.format('%06d', tonumber(t[2]))
local order = us
if now < tonumber(m[1]) then
  order = ARGV[2]
end
redis.call('ZADD', KEYS[2], order, user)
if m[4] then
  redis.call('PEXPIREAT', KEYS[2], m[4])
end
return {0, reset}
