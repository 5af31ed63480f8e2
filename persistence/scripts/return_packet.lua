-- Puts a packet whose grab the database refused back among the red
-- packet's unclaimed packets, once per refused log entry, if Redis holds
-- the red packet and not the packet already. The returned set lives as
-- long as the red packet.
--
-- KEYS[1] -> {rp<ID>}:meta
-- KEYS[2] -> {rp<ID>}:packets
-- KEYS[3] -> {rp<ID>}:returned
-- ARGV[1] -> the refused entry: log key/entry id
-- ARGV[2] -> the packet, "seq:amount"
-- ARGV[3] -> its amount, cents
--
-- Returns: 1 if it returned the packet, 0 if not.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then return 0 end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
if redis.call('LPOS', KEYS[2], ARGV[2]) then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'left', ARGV[3])
return 1
