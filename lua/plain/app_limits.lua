-- app_limits.lua: store an application's shared budgets where intake.lua and admit.lua read them.
--
-- KEYS[1] meta
-- ARGV: 1 revision  2 max_unfinished  3 max_concurrency  4 rate_per_second
--
-- Several writers race (the configure call, every executor's catalog refresh, a rebuild): the
-- newest configuration revision wins, an older one never overwrites it. Returns 1 if written.

local current = tonumber(redis.call('HGET', KEYS[1], 'app:revision') or '0')
if tonumber(ARGV[1]) < current then return 0 end
redis.call('HSET', KEYS[1], 'app:revision', ARGV[1], 'app:max_unfinished', ARGV[2],
  'app:max_concurrency', ARGV[3], 'app:rate_per_second', ARGV[4])
return 1
