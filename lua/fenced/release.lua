-- release.lua: give back a reservation whose command was not committed (PostgreSQL failed, the
-- namespace was paused in PostgreSQL, or the key already had a row).
--
-- KEYS[1] meta  KEYS[2] count  KEYS[3] resv  KEYS[4] rk
-- ARGV: 1 id  2 rk_field  3 ns  4 cmd  5 existing_value (optional: "<id> <sha256hex> c" of the row
--       that PostgreSQL already holds for this key, remembered so the next replay needs no query)
--
-- The ZREM result makes the release exactly-once: a reservation that already expired (and was
-- given back by intake.lua) is not given back twice. Returns 1 if this call released it, 0 if
-- not, and "NOT_READY" while the projection is not trusted (a rebuild clears every reservation,
-- so there is nothing to give back then).

local meta, count, resv, rk = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if not epoch_check(meta, 0, epoch_now()) then return 'NOT_READY' end
local id, field, ns, cmd = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local released = redis.call('ZREM', resv, id .. ' ' .. field)
if released == 1 then
  redis.call('HINCRBY', count, 'unfinished', -1)
  redis.call('HINCRBY', count, 'waiting:' .. ns, -1)
  redis.call('HINCRBY', count, 'queued:' .. ns .. ':' .. cmd, -1)
end
local cur = redis.call('HGET', rk, field)
if cur and string.sub(cur, 1, 36) == id and string.sub(cur, 103) == 'p' then
  redis.call('HDEL', rk, field)
  cur = nil
end
if ARGV[5] and ARGV[5] ~= '' and (not cur or string.sub(cur, 103) == 'p') then
  redis.call('HSET', rk, field, ARGV[5])
end
return released
