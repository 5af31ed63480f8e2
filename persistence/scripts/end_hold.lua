-- Ends a reload's hold on a voucher's sales before its time (see
-- Stock.Preheat and catalog.Holds): every order writer that could hold an
-- order of the lost load has finished what it held, so nothing is left
-- to wait for. Only the load that was reloaded: a newer reload keeps its
-- own hold. After it, an order of the lost load that still comes is
-- refused by adopt_orders.lua, never sold twice.
--
-- KEYS[1] -> {v<ID>}:meta
-- ARGV[1] -> the load stamp of the reload
--
-- Returns: 1 if it ended a hold, 0 if the load is another one or holds
-- nothing.

if redis.call('HGET', KEYS[1], '${metaLoadStamp}') ~= ARGV[1] then return 0 end
return redis.call('HDEL', KEYS[1], 'hold')
