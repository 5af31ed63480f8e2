-- Sells a whole batch of grabs of one voucher atomically. For each grab, in
-- order: a request id seen before answers its first result (a retried batch
-- or request never sells twice); otherwise status, the time window (Redis
-- TIME), the user's live orders and stock decide (a user at their limit
-- hears so even after the sell-out), and a sale deducts stock, counts the
-- user's order, remembers the request, and appends the order to the
-- voucher's order log, in one atomic step. Each order-log entry carries the
-- request id and the load stamp of the load it was sold from (keys.go names
-- its fields). The whole batch is refused if the caller's fencing token is
-- not the newest: a stale actor activation can never sell. It sells only
-- from a load verified on this very Redis process (metaRun equal to the
-- server's run id): after a restart from an older file or the promotion of
-- a replica, the state may be older than what was sold and answered, and
-- the batch is answered as for a voucher Redis does not hold, so that the
-- load is rebuilt from the database first (Stock.Preheat). The same holds
-- after Redis evicted a key (the token of the load counts evictions, see
-- serverRunLua), and while its maxmemory-policy evicts nothing is sold.
--
-- Order and user ids stay strings: Lua numbers are doubles, and order ids
-- exceed 2^53.
--
-- A batch that sold nothing but answered earlier sales of its request ids
-- counts them in the metadata (replays), a write that makes the WAIT behind
-- it cover those sales. With no grab it only reads: a sequencer confirms
-- its record of the sales that way (the tally: request ids sold and the load stamp, see
-- domain.SalesTally).
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:stock
-- KEYS[3] -> {v<ID>}:users
-- KEYS[4] -> {v<ID>}:fence[:<segment>], the caller's segment's
-- KEYS[5] -> {v<ID>}:req
-- KEYS[6] -> {v<ID>}:log
-- KEYS[7] -> {v<ID>}:qa, the waiting room's open tickets: a sale uses its
--            buyer's admission up, freeing the slot for the next in line
--            (nothing for a voucher without a room)
-- ARGV[1] -> the caller's fencing token
-- ARGV[2] -> voucher id
-- ARGV[3], ARGV[4], ARGV[5] -> request id, user id, order id of the first
--            grab; the same three for each further grab
--
-- Returns: {state, remaining, status, begin, end, refusal, requests sold,
-- load stamp or '', claim or '', log position, time, slot, code1, order1,
-- code2, order2, ...}, state
-- 0 = done. {-1, 0, 0, 0, 0}: the fence is stale; {1, 0, 0, 0, 0}: Redis
-- does not hold the voucher, or holds a load not verified on this server;
-- {2, 0, 0, 0, 0, token}: Redis's maxmemory-policy evicts keys (token is
-- '!<policy>'); none of them wrote anything. A code indexes
-- scriptCodes (grab.go): 0 OK (order: the order id, or the first answer's
-- for a request id seen before), 2 not started, 3 ended, 4 paused, 5 sold
-- out, 6 limit reached, 7 unavailable (a reload holds the sales); order is
-- '0' for all but OK. refusal is the code that status, time window or hold
-- give every new grab (0: none). The log position is the id of the last
-- order-log entry that holds an order this batch answered OK: its last
-- sale's, or for a batch that only answered earlier sales the log's last
-- entry ('' when the log is empty: those were stored already); time and
-- slot are the batch's entry fields. The node keeps the batch's OK'd
-- orders until a writer has read the log past that position
-- (persistence.SoldShadow).

local run = ${serverRun}
if string.sub(run, 1, 1) == '!' then
  return {2, 0, 0, 0, 0, run}
end
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return {-1, 0, 0, 0, 0}
end
local m = redis.call('HMGET', KEYS[1], 'status', 'begin', 'end', 'limit', 'expire', '${metaLoadStamp}', 'hold', '${metaClaim}', '${metaRun}')
local status = tonumber(m[1])
if not status or m[9] ~= run then
  return {1, 0, 0, 0, 0}
end
local begin_ms, end_ms, limit = tonumber(m[2]), tonumber(m[3]), tonumber(m[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The entry's time as a string built from TIME's own strings: a Lua number
-- written back to Redis may be formatted as a float.
local now_s = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
local verdict = 0
if status == 2 then verdict = 4
elseif status == 3 then verdict = 3
elseif m[7] and now < tonumber(m[7]) then verdict = 7 -- a reload holds its sales (Stock.Preheat)
elseif now < begin_ms then verdict = 2
elseif now >= end_ms then verdict = 3
end
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
local slot = '0'
if limit == 1 then slot = '1' end
-- One order-log entry, reused for every sale of the batch; it carries the
-- request id and the load stamp of the load the order is sold from, when
-- there is one.
local entry = {'${EntryOrderID}', '', '${EntryUserID}', '', '${EntryRequestID}', '', '${EntryVoucherID}', ARGV[2], '${EntryTime}', now_s, '${EntrySlot}', slot}
if m[6] then
  entry[#entry + 1] = '${EntryLoadStamp}'
  entry[#entry + 1] = m[6]
end
local out = {0, 0, status, begin_ms, end_ms, verdict, 0, m[6] or '', m[8] or '', '', now_s, slot}
local sold, replayed = 0, 0
for i = 3, #ARGV, 3 do
  local req, user, oid = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local prev = redis.call('HGET', KEYS[5], req)
  if prev then
    replayed = replayed + 1
    out[#out + 1] = 0
    out[#out + 1] = prev
  elseif verdict ~= 0 then
    out[#out + 1] = verdict
    out[#out + 1] = '0'
  elseif tonumber(redis.call('HGET', KEYS[3], user) or '0') >= limit then
    out[#out + 1] = 6
    out[#out + 1] = '0'
  elseif stock <= 0 then
    out[#out + 1] = 5
    out[#out + 1] = '0'
  else
    stock = stock - 1
    sold = sold + 1
    redis.call('HINCRBY', KEYS[3], user, 1)
    redis.call('HSET', KEYS[5], req, oid)
    redis.call('ZREM', KEYS[7], user)
    entry[2] = oid
    entry[4] = user
    entry[6] = req
    out[10] = redis.call('XADD', KEYS[6], '*', unpack(entry))
    out[#out + 1] = 0
    out[#out + 1] = oid
  end
end
if sold > 0 then
  redis.call('DECRBY', KEYS[2], sold)
  if m[5] then
    redis.call('PEXPIREAT', KEYS[5], m[5])
  end
elseif replayed > 0 then
  -- A batch that only answers earlier sales still writes, so that the WAIT
  -- behind it waits for those sales: Redis 7.2 and later move a
  -- connection's replication offset only when its command writes, and a
  -- WAIT after a script that wrote nothing returns at once.
  redis.call('HINCRBY', KEYS[1], 'replays', 1)
  local last = redis.call('XREVRANGE', KEYS[6], '+', '-', 'COUNT', 1)
  if last[1] then
    out[10] = last[1][1]
  end
end
out[2] = stock
out[7] = redis.call('HLEN', KEYS[5])
return out
