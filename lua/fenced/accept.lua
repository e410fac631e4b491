-- accept.lua: project commands that PostgreSQL has just committed (transition `accept`).
--
-- KEYS[1] meta  KEYS[2] count  KEYS[3] ready (commands with waiting work)  KEYS[4] turn; then
--   per command i (0-based), keys starting at 5 + 5i: resv (reservation zset of its command),
--   rk (request-key map), q (its resource queue), cmd (its status hash), rq (its command's
--   resources with waiting work)
-- ARGV[1] the generation the reservations were made under; then per command nine values
--   starting at 2 + 9i: id, rk_field, content_sha256_hex, seq, ns, cmd, accepted_at,
--   deadline_at, lim (its rendered limit keys as JSON `[[template, key], ...]`, or "")
--
-- Returns {"NOT_READY"}, {"STALE"} or {now_ms, rank_1, …, rank_n} (each command's 0-based
-- queue position once the whole batch is queued, false when it is not waiting in its queue).
--
-- STALE: the projection was rebuilt since the reservations. Their commits were fenced on that
-- generation, so they committed before the rebuild's snapshot, which projected them: nothing is
-- written (projecting again could resurrect a command that has already run).
--
-- A command whose status hash exists is already projected (by the reconciler, or it already
-- ended): it is not queued again. Counting happens exactly once per command: the reservation's
-- counts carry over to the queued command; a reservation that already expired gave its counts
-- back (they are taken again); a command already projected gives the reservation's back.

local meta, count, ready, turn = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = epoch_now()
local generation = epoch_check(meta, 0, now)
if not generation then return {'NOT_READY'} end
if generation ~= tonumber(ARGV[1]) then return {'STALE'} end

-- Where a queue key's suffix "<ns>:<cmd>:<resource>" starts: after "{a:ID}:q:".
local suffix_at = #string.match(count, '^(.*):count$') + 4
local n = (#ARGV - 1) / 9
local last_turn = tonumber(redis.call('GET', turn) or '0')
local answer = {now}
for i = 0, n - 1 do
  local resv, rk, q, cmdkey, rq = KEYS[5 + 5 * i], KEYS[6 + 5 * i], KEYS[7 + 5 * i],
    KEYS[8 + 5 * i], KEYS[9 + 5 * i]
  local a = 2 + 9 * i
  local id, field, digest, seq, ns, cmd = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
    ARGV[a + 4], ARGV[a + 5]
  local held = redis.call('ZREM', resv, id .. ' ' .. field)
  local fresh = 0
  if redis.call('EXISTS', cmdkey) == 0 then
    fresh = redis.call('ZADD', q, 'NX', seq, id)
    redis.call('HSET', cmdkey, 'status', 'accepted', 'seq', seq, 'q', q, 'ns', ns, 'cmd', cmd,
      'accepted_at', ARGV[a + 6], 'deadline_at', ARGV[a + 7], 'updated_at', ARGV[a + 6])
    if ARGV[a + 8] ~= '' then redis.call('HSET', cmdkey, 'lim', ARGV[a + 8]) end
  end
  if fresh == 1 then
    -- A resource (and a command) new to the ready sets joins the back of the round-robin
    -- order: everything already waiting was there first.
    redis.call('ZADD', rq, 'NX', last_turn, string.sub(q, suffix_at))
    redis.call('ZADD', ready, 'NX', last_turn, ns .. ':' .. cmd)
  end
  local delta = fresh - held
  if delta ~= 0 then
    redis.call('HINCRBY', count, 'unfinished', delta)
    redis.call('HINCRBY', count, 'waiting:' .. ns, delta)
    redis.call('HINCRBY', count, 'queued:' .. ns .. ':' .. cmd, delta)
  end
  redis.call('HSET', rk, field, id .. ' ' .. digest .. ' c')
end
-- Positions once every command of the batch is queued: a command of the batch with a lower
-- sequence queued after another stands ahead of it, and the answer is the rank at `now`, after
-- the whole call (what a poll at that instant would read).
for i = 0, n - 1 do
  answer[#answer + 1] = redis.call('ZRANK', KEYS[7 + 5 * i], ARGV[2 + 9 * i]) or false
end
return answer
