-- Loads a red packet into Redis unless it is there: its metadata (with the
-- run id of this server, metaRun, which verifies the load), its packets
-- not grabbed yet and the users who grabbed, and for a reload the Redis
-- time until which it holds new grabs. A load not verified on this server
-- is removed in the same transaction before this runs (RedPacketRedis.Load). Its keys outlive the expiry
-- until the keep-until time, in case no refund removes them first.
--
-- KEYS[1] -> {rp<ID>}:meta
-- KEYS[2] -> {rp<ID>}:packets
-- KEYS[3] -> {rp<ID>}:users
-- ARGV[1] -> expiry, unix ms
-- ARGV[2] -> keep-until, unix ms
-- ARGV[3] -> cents left
-- ARGV[4] -> how long a reload holds new grabs, ms (0: none)
-- ARGV[5] -> n, the number of packets; then n packets "seq:amount", then
--            (user id, "seq:amount:request id") pairs of the users who
--            grabbed
--
-- Returns: 1 if it loaded the red packet, 0 if Redis had it, -1 if Redis's
-- maxmemory-policy evicts keys (nothing written; see grab.lua).

local run = ${serverRun}
if string.sub(run, 1, 1) == '!' then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local n = tonumber(ARGV[5])
for i = 6, 5 + n do
  redis.call('RPUSH', KEYS[2], ARGV[i])
end
for i = 6 + n, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'expire', ARGV[1], 'left', ARGV[3], '${metaRun}', run)
if tonumber(ARGV[4]) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'hold', string.format('%.0f', now + tonumber(ARGV[4])))
end
for i = 1, 3 do
  redis.call('PEXPIREAT', KEYS[i], ARGV[2])
end
return 1
