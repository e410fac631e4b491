-- accept.lua: project a batch of commands that PostgreSQL has just committed.
--
-- KEYS[1] count  KEYS[2] ready (resources with waiting work); then per command i (0-based):
--   resv (reservation zset of its command), rk (request-key map), q (its resource queue),
--   cmd (its status hash); keys start at 3 + 4i
-- ARGV per command, nine values starting at 1 + 9i:
--   id, rk_field, content_sha256_hex, seq, ns, cmd, accepted_at, deadline_at,
--   lim (its rendered limit keys as JSON `[[template, key], ...]`, or "" when it has none)
--
-- A reservation's counts carry over to the accepted command. Counting happens exactly once per
-- command even if the reservation already expired (its counts were given back: take them again)
-- or the command was already projected by someone else (drop the reservation's counts).
-- Returns {now_ms, rank_1, …, rank_n}: Redis time and each command's 0-based queue position.

local count, ready = KEYS[1], KEYS[2]
-- Where a queue key's suffix "<ns>:<cmd>:<resource>" starts: after "{a:ID}:q:".
local suffix_at = #string.match(count, '^(.*):count$') + 4
local n = #ARGV / 9
local t = redis.call('TIME')
local answer = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i = 0, n - 1 do
  local resv, rk, q, cmdkey = KEYS[3 + 4 * i], KEYS[4 + 4 * i], KEYS[5 + 4 * i], KEYS[6 + 4 * i]
  local a = 1 + 9 * i
  local id, field, digest, seq, ns, cmd = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
  local held = redis.call('ZREM', resv, id .. ' ' .. field)
  local fresh = redis.call('ZADD', q, 'NX', seq, id)
  local delta = fresh - held
  if fresh == 1 then
    -- A resource new to the ready set goes to the front: it has waited for nothing yet.
    redis.call('ZADD', ready, 'NX', 0, string.sub(q, suffix_at))
  end
  if delta ~= 0 then
    redis.call('HINCRBY', count, 'unfinished', delta)
    redis.call('HINCRBY', count, 'waiting:' .. ns, delta)
    redis.call('HINCRBY', count, 'queued:' .. ns .. ':' .. cmd, delta)
  end
  redis.call('HSET', cmdkey, 'status', 'accepted', 'seq', seq, 'q', q, 'ns', ns, 'cmd', cmd,
    'accepted_at', ARGV[a + 6], 'deadline_at', ARGV[a + 7], 'updated_at', ARGV[a + 6])
  if ARGV[a + 8] ~= '' then redis.call('HSET', cmdkey, 'lim', ARGV[a + 8]) end
  redis.call('HSET', rk, field, id .. ' ' .. digest .. ' c')
  answer[#answer + 1] = redis.call('ZRANK', q, id)
end
return answer
