-- ready.lua: the two ends of a rebuild (an epoch change) in `meta`.
--
-- KEYS[1] meta
-- ARGV: 1 "fence" or "open"  2 the rebuild's token  3 (open) the new generation
--       4 (open) "first" when the application never had a projection before
--
-- fence: marks the projection not ready (every script that decides or writes answers NOT_READY
--   from here on) and records the rebuild's token and this Redis process; returns the process.
-- open: marks the rebuilt projection ready at the new generation and records the process as
--   verified (lib/epoch.lua), and `opened_at`: token buckets the rebuild cleared count as empty
--   at the fence, the last moment the projection it replaces could have handed out a token (a
--   lost or rolled-back projection hands out nothing: its scripts answer NOT_READY), so tokens
--   spent before the loss are never handed out again, and the rebuild's own duration refills
--   them (an application's first projection had no buckets to lose: they count as full). Only
--   if the fence is still there and the process is the same: a FLUSHALL or a restart while the
--   rebuild wrote would otherwise open half a projection.
--   Returns 1, or 0 when the rebuild must start over.
local meta, token = KEYS[1], ARGV[2]
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] == 'fence' then
  redis.call('HSET', meta, 'ready', '0', 'rebuild', token, 'rebuild_run_id', run_id,
    'fenced_at', now)
  return run_id
end
local m = redis.call('HMGET', meta, 'rebuild', 'rebuild_run_id', 'fenced_at')
if m[1] ~= token or m[2] ~= run_id then return 0 end
redis.call('HSET', meta, 'generation', ARGV[3], 'ready', '1', 'run_id', run_id,
  'lastsave', tostring(redis.call('LASTSAVE')), 'checked_at', now,
  'opened_at', ARGV[4] == 'first' and 0 or m[3])
redis.call('HDEL', meta, 'rebuild', 'rebuild_run_id', 'lost_at', 'fenced_at')
return 1
