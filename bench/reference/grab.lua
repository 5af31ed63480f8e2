-- The seeds' seckill.lua with the order-log XADD, as the reference design
-- runs it: stock check, one order per user, take the unit, remember the
-- buyer, queue the order, in one atomic step.
--
-- KEYS[1] -> the voucher's stock (a string)
-- KEYS[2] -> the voucher's buyers (a set of user ids)
-- KEYS[3] -> the order stream
-- ARGV[1] -> voucher id
-- ARGV[2] -> user id
-- ARGV[3] -> order id
--
-- Returns: 0 OK, 1 sold out, 2 already bought, 3 no such voucher.

local stock = redis.call('get', KEYS[1])
if not stock then return 3 end
if tonumber(stock) <= 0 then return 1 end
if redis.call('sismember', KEYS[2], ARGV[2]) == 1 then return 2 end
redis.call('incrby', KEYS[1], -1)
redis.call('sadd', KEYS[2], ARGV[2])
redis.call('xadd', KEYS[3], '*', 'userId', ARGV[2], 'voucherId', ARGV[1], 'id', ARGV[3])
return 0
