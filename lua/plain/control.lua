-- control.lua: store pause flags where intake.lua reads them.
--
-- KEYS[1] meta
-- ARGV: triples of  scope (`<ns>` or `<ns>:<cmd>`)  paused (`1`/`0`)  revision
--
-- Writers race (the control call, every rebuild, every executor's catalog refresh), and each
-- writes only values PostgreSQL has committed: the newest revision of a scope wins, an older one
-- never overwrites it. Writing does not need a ready projection: the meta hash survives a
-- rebuild's clearing, so a flag stored meanwhile is kept. Returns how many scopes were written.

local meta = KEYS[1]
local written = 0
for i = 1, #ARGV, 3 do
  local scope, paused, revision = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local current = tonumber(redis.call('HGET', meta, 'pause_rev:' .. scope) or '0')
  if revision >= current then
    redis.call('HSET', meta, 'paused:' .. scope, paused, 'pause_rev:' .. scope, revision)
    written = written + 1
  end
end
return written
