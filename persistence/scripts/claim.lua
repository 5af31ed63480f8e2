-- Takes a fencing token for a new actor activation of one segment, writes
-- the activation's claim nonce into the metadata and reads the voucher with
-- its tally of sales, in one step, but only for a voucher Redis knows, in
-- a load verified on this Redis process (see grab.lua): unknown ids leave
-- no key behind, and an unverified load is rebuilt first. A caller that holds a fence already
-- (a refence) claims only while its fence is still the newest, so calls
-- made under the old fence are refused from then on.
--
-- KEYS[1] -> {v<ID>}:meta
-- KEYS[2] -> {v<ID>}:stock
-- KEYS[3] -> {v<ID>}:fence[:<segment>], the activation's segment's
-- KEYS[4] -> {v<ID>}:req
-- KEYS[5] -> {v<ID>}:users
-- ARGV[1] -> the activation's claim nonce
-- ARGV[2] -> the fence the caller holds, or '' for a first claim
--
-- Returns: {fence, status, begin, end, limit, stock, segments, requests
-- sold, buyers, load stamp or '', held (1 while a reload holds the sales,
-- else 0)}; a missing field is false (nil), never a hole that would cut the
-- list short. {0}: Redis does not hold the voucher, or not in a load
-- verified on this server; {-1}: ARGV[2] was superseded; {-2, token}:
-- Redis's maxmemory-policy evicts keys (see grab.lua). None of them wrote
-- anything.

local token = ${serverRun}
if string.sub(token, 1, 1) == '!' then
  return {-2, token}
end
local run = redis.call('HGET', KEYS[1], '${metaRun}')
if not run or run ~= token then
  return {0}
end
if ARGV[2] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return {-1}
end
local f = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], '${metaClaim}', ARGV[1])
local m = redis.call('HMGET', KEYS[1], 'status', 'begin', 'end', 'limit', 'segs', '${metaLoadStamp}', 'hold')
local held = 0
if m[7] then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) < tonumber(m[7]) then
    held = 1
  end
end
return {f, m[1] or false, m[2] or false, m[3] or false, m[4] or false, redis.call('GET', KEYS[2]) or false, m[5] or false,
  redis.call('HLEN', KEYS[4]), redis.call('HLEN', KEYS[5]), m[6] or '', held}
