-- Grabs for a batch of users atomically (seed 004's script, batched like
-- the voucher's grab script). For each grab in order: a user who grabbed
-- before hears OK with their packet if it is the same request (a retry),
-- else ALREADY_GRABBED; after the expiry (Redis TIME) EXPIRED; while a
-- reload holds its grabs (meta hold), a user without a packet hears
-- UNAVAILABLE and nothing is popped; else a packet is popped (EMPTY if
-- none is left), the user recorded with it, the cents left lowered and the
-- packet appended to the red packet's order log, in one atomic step. No
-- fencing token: the users hash makes a grab idempotent per user, so two
-- activations of the sequencer can never give one user two packets nor
-- one packet twice. It grabs only from a load verified on this very Redis
-- process (metaRun equal to the server's run id): after a restart from an
-- older file or the promotion of a replica, Redis may have forgotten
-- packets it handed out, and the batch is answered as for a red packet
-- Redis does not hold, so that it is loaded again from the database first
-- (RedPacketRedis.Load).
--
-- KEYS[1] -> {rp<ID>}:meta
-- KEYS[2] -> {rp<ID>}:packets
-- KEYS[3] -> {rp<ID>}:users
-- KEYS[4] -> {rp<ID>}:log
-- ARGV[1] -> red packet id
-- ARGV[2], ARGV[3] -> request id, user id of the first grab; the same two
--            for each further grab
--
-- Returns: {state, expiry ms, packets left, code1, amount1, ...}, state 0
-- = done; {1, 0, 0}: Redis does not hold the red packet, or not in a load
-- verified on this server; {2, 0, 0, token}: Redis's maxmemory-policy
-- evicts keys (see grab.lua); neither wrote anything. A code indexes
-- redPacketScriptCodes (redpacket.go): 0 OK, 1 empty, 2 already grabbed, 3
-- expired, 4 unavailable; amount is the user's packet's cents for 0 and 2,
-- else '0'.

local run = ${serverRun}
if string.sub(run, 1, 1) == '!' then return {2, 0, 0, run} end
local m = redis.call('HMGET', KEYS[1], 'expire', 'hold', '${metaRun}')
local expire = tonumber(m[1] or '')
if not expire or m[3] ~= run then return {1, 0, 0} end
local hold = tonumber(m[2] or '0')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
local out = {0, expire, 0}
local granted, replayed = 0, 0
for i = 2, #ARGV, 2 do
  local req, user = ARGV[i], ARGV[i + 1]
  local prev = redis.call('HGET', KEYS[3], user)
  if prev then
    replayed = replayed + 1
    local _, amount, preq = string.match(prev, '^(%d+):(%d+):(.*)$')
    if preq == req then out[#out + 1] = 0 else out[#out + 1] = 2 end
    out[#out + 1] = amount
  elseif now >= expire then
    out[#out + 1] = 3
    out[#out + 1] = '0'
  elseif now < hold then
    out[#out + 1] = 4
    out[#out + 1] = '0'
  else
    local p = redis.call('LPOP', KEYS[2])
    if not p then
      out[#out + 1] = 1
      out[#out + 1] = '0'
    else
      local seq, amount = string.match(p, '^(%d+):(%d+)$')
      redis.call('HSET', KEYS[3], user, p .. ':' .. req)
      redis.call('HINCRBY', KEYS[1], 'left', '-' .. amount)
      redis.call('XADD', KEYS[4], '*', '${EntryRedPacketID}', ARGV[1], '${EntryPacketSeq}', seq,
        '${EntryUserID}', user, '${EntryAmount}', amount, '${EntryTime}', now_s, '${EntryRequestID}', req)
      granted = granted + 1
      out[#out + 1] = 0
      out[#out + 1] = amount
    end
  end
end
if granted == 0 and replayed > 0 then
  -- So that the WAIT behind a batch that only answers earlier grabs waits
  -- for them (Redis 7.2 and later move a connection's replication offset
  -- only when its command writes; see grab.lua).
  redis.call('HINCRBY', KEYS[1], 'replays', 1)
end
out[3] = redis.call('LLEN', KEYS[2])
return out
