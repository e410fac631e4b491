-- cache_fill.lua: store what the origin answered, if this caller still holds the fill lease and
-- no dependency changed since it looked the entry up; always gives the lease back.
--
-- KEYS[1] entry  KEYS[2] fill lease  KEYS[3] index (zset: entry key -> expiry ms)
-- KEYS[4] sizes (hash: entry key -> bytes)  KEYS[5] totals (hash: bytes, keys)
-- KEYS[6..] dependency versions
-- ARGV: 1 lease token  2 versions seen by cache_read.lua  3 body  4 status (`ok`, `not_found`,
--       `error`, or `none`: give the lease back unfilled, the rest unused)  5 fresh ms  6 stale ms (after fresh)  7 extra ms before the key expires
--       (jitter)  8 the application's byte bound  9 the application's key bound
-- Returns {stored (1/0), why, generated_ms}: why is `stored`, `lease_lost`, `invalidated`,
-- `full` or `given_back`.
--
-- The application's cache is bounded: entries are indexed by expiry, so the totals are kept
-- exact by trimming expired entries (a bounded number per call) before counting a new one. A
-- value that would pass a bound is not stored (the caller still serves it).

local entry, lease, index, sizes, totals = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function release()
  if redis.call('GET', lease) == ARGV[1] then redis.call('DEL', lease) end
end
if redis.call('GET', lease) ~= ARGV[1] then return {0, 'lease_lost', now} end
-- A caller whose origin call a budget refused: the next caller may fill at once.
if ARGV[4] == 'none' then release(); return {0, 'given_back', now} end
local versions = {}
for i = 6, #KEYS do versions[#versions + 1] = redis.call('GET', KEYS[i]) or '0' end
if table.concat(versions, ',') ~= ARGV[2] then release(); return {0, 'invalidated', now} end

-- Forget entries that expired (at most 100 per call; the rest on later calls).
local gone = redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, 100)
for _, key in ipairs(gone) do
  local size = tonumber(redis.call('HGET', sizes, key) or '0')
  redis.call('HINCRBY', totals, 'bytes', -size)
  redis.call('HINCRBY', totals, 'keys', -1)
  redis.call('HDEL', sizes, key)
  redis.call('ZREM', index, key)
end

local body = ARGV[3]
local size = #body + 64
local previous = redis.call('HGET', sizes, entry)
local bytes = tonumber(redis.call('HGET', totals, 'bytes') or '0')
local keys = tonumber(redis.call('HGET', totals, 'keys') or '0')
if previous then
  bytes = bytes - tonumber(previous)
  keys = keys - 1
end
if bytes + size > tonumber(ARGV[8]) or keys + 1 > tonumber(ARGV[9]) then
  release()
  return {0, 'full', now}
end

local fresh = now + tonumber(ARGV[5])
local stale = fresh + tonumber(ARGV[6])
local expires = stale + tonumber(ARGV[7])
redis.call('DEL', entry)
redis.call('HSET', entry, 'body', body, 'status', ARGV[4], 'generated', now, 'fresh', fresh,
  'stale', stale, 'deps', ARGV[2])
redis.call('PEXPIREAT', entry, expires)
redis.call('ZADD', index, expires, entry)
redis.call('HSET', sizes, entry, size)
redis.call('HINCRBY', totals, 'bytes', size - (tonumber(previous) or 0))
if not previous then redis.call('HINCRBY', totals, 'keys', 1) end
release()
return {1, 'stored', now}
