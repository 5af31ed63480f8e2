-- Writes a voucher's waiting-room settings (the opening and the end,
-- unix ms; the pace; the open tickets allowed; paused; when the room's
-- keys lapse, unix ms), keeping its line, admissions and counters. A
-- room made now is stamped with this server's token (qmRun), so that its
-- state is trusted here (see queue_join.lua). An empty ARGV value leaves
-- that setting as it is.
--
-- KEYS[1] -> {v<ID>}:qm
-- ARGV[1] -> open, ARGV[2] -> end, ARGV[3] -> rate, ARGV[4] -> max,
-- ARGV[5] -> paused ('1'/'0'), ARGV[6] -> expire
--
-- Returns: 1, or 4 when Redis evicts keys (nothing written).

local run = ${serverRun}
if string.sub(run, 1, 1) == '!' then
  return 4
end
local names = {'${qmOpen}', '${qmEnd}', '${qmRate}', '${qmMax}', '${qmPaused}', '${qmExpire}'}
for i, name in ipairs(names) do
  if ARGV[i] ~= '' then
    redis.call('HSET', KEYS[1], name, ARGV[i])
  end
end
if redis.call('HEXISTS', KEYS[1], '${qmRun}') == 0 then
  redis.call('HSET', KEYS[1], '${qmRun}', run)
end
if ARGV[6] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[6])
end
return 1
