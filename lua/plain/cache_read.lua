-- cache_read.lua: look a cached read up, and take the key's fill lease when it needs filling.
--
-- KEYS[1] entry (hash)  KEYS[2] fill lease of the entry (string)  KEYS[3..] dependency versions
-- ARGV: 1 lease token (unique per caller)  2 lease ms
-- Returns {state, lease_taken, now_ms, versions, body, status, generated_ms, fresh_until_ms,
--          stale_until_ms}; state is `fresh`, `stale` or `miss`; versions is the dependency
-- versions now, comma-separated (a fill must present them again: see cache_fill.lua).
--
-- An entry filled under other dependency versions is a miss: invalidation bumps a version and
-- never scans or deletes keys. A stale or missing entry hands the lease to exactly one caller
-- across every gateway (SET NX PX); the others serve stale or wait. Reads only otherwise.

local entry, lease = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local versions = {}
for i = 3, #KEYS do versions[#versions + 1] = redis.call('GET', KEYS[i]) or '0' end
local current = table.concat(versions, ',')

local e = redis.call('HMGET', entry, 'body', 'status', 'generated', 'fresh', 'stale', 'deps')
local state = 'miss'
if e[1] and e[6] == current then
  if now < tonumber(e[4]) then
    state = 'fresh'
  elseif now < tonumber(e[5]) then
    state = 'stale'
  end
end
local taken = 0
if state ~= 'fresh' and redis.call('SET', lease, ARGV[1], 'NX', 'PX', ARGV[2]) then taken = 1 end
if state == 'miss' then return {state, taken, now, current} end
return {state, taken, now, current, e[1], e[2], e[3], e[4], e[5]}
