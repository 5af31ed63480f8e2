-- Puts grabs into a red packet Redis holds unless they are there: a grab
-- read from the order log before Redis lost its data, and committed after
-- a reload from the database that did not have it yet. Its user must have
-- no packet in Redis and its packet must still be unclaimed there (the
-- reload holds new grabs for a while so that it is, see
-- RedPacketStore.Load); then the packet leaves the unclaimed ones and the
-- user is recorded with it, as the grab script would have done. A grab
-- whose user holds it already (every grab outside a reload) is left alone.
-- Nothing if Redis lacks the red packet: a load, which waits for this
-- commit, reads them.
--
-- KEYS[1] -> {rp<ID>}:meta
-- KEYS[2] -> {rp<ID>}:packets
-- KEYS[3] -> {rp<ID>}:users
-- ARGV[1..4] -> user id, "seq:amount", request id, amount of the first
--               grab; the same four for each further grab
--
-- Returns: the 1-based positions of the grabs that cannot be adopted:
-- their user holds another packet, or their packet went to someone else.

if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local lost = {}
local n = 0
for i = 1, #ARGV, 4 do
  n = n + 1
  local prev = redis.call('HGET', KEYS[3], ARGV[i])
  if prev then
    if string.sub(prev, 1, #ARGV[i + 1] + 1) ~= ARGV[i + 1] .. ':' then lost[#lost + 1] = n end
  elseif redis.call('LREM', KEYS[2], 1, ARGV[i + 1]) == 1 then
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1] .. ':' .. ARGV[i + 2])
    redis.call('HINCRBY', KEYS[1], 'left', '-' .. ARGV[i + 3])
  else
    lost[#lost + 1] = n
  end
end
return lost
