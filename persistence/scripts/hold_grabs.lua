-- Records that a writer holds grabs of the red packet it has not
-- committed, until ARGV[2] ms from now (Redis time), so that the refund
-- waits for them (settle_red_packet.lua). A writer records it before every
-- attempt to commit, also while the database refuses it, and removes it
-- once its grabs are committed or refused: a Redis that lost the record
-- gets it again within one retry. The key lives at least as long as the
-- claim.
--
-- KEYS[1] -> {rp<ID>}:holders
-- ARGV[1] -> the writer's consumer name
-- ARGV[2] -> how long the claim holds, ms
--
-- Returns: 1.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
