-- requeue.lua: put a started command back in line after PostgreSQL moved it back to waiting
-- (transitions `requeue` and `rescue`): its attempt was given back, its lease lapsed, or it was
-- admitted but could not be claimed.
--
-- KEYS[1] meta  KEYS[2] count  KEYS[3] q (its resource queue)  KEYS[4] cmd (status hash)
-- KEYS[5] rq (its command's resources with waiting work)  KEYS[6] ready  KEYS[7] turn
-- KEYS[8 ..] the permits the command may hold (lib/epoch.lua's declared permits)
-- ARGV: 1 id  2 attempt (the one given back; "" for a command Redis shows waiting)  3 seq
--       4 ns  5 cmd  6 queue suffix  7 status (accepted | retry_wait)  8 updated_at
--
-- Fenced by the attempt: only the attempt Redis has on record for the command is put back.
-- A requeue that comes late — after the command was admitted again (another attempt), after it
-- ended, or for a command Redis does not know — changes nothing: it can neither release
-- another attempt's permits nor resurrect a final status.
-- ZADD NX makes the waiting counts exactly-once; its original sequence keeps its place in line.
-- Returns "NOT_READY", "STALE" (nothing done), {"KEYS", key, ...} (permits held that are not in
-- KEYS: nothing done) or "OK".

local meta, count, q, cmdkey, rq, ready, turn = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6], KEYS[7]
local now = epoch_now()
if not epoch_check(meta, 0, now) then return 'NOT_READY' end
local id = ARGV[1]
local h = redis.call('HMGET', cmdkey, 'status', 'attempt', 'held')
if not h[1] or TERMINAL[h[1]] or h[1] == 'needs_review' or h[1] == 'running'
    or (h[2] or '') ~= ARGV[2] then
  return 'STALE'
end
local missing = undeclared_held(h[3], {})
if #missing > 0 then return keys_answer(missing) end
release_held(cmdkey, id)
if redis.call('ZADD', q, 'NX', ARGV[3], id) == 1 then
  redis.call('HINCRBY', count, 'waiting:' .. ARGV[4], 1)
  redis.call('HINCRBY', count, 'queued:' .. ARGV[4] .. ':' .. ARGV[5], 1)
  local last_turn = tonumber(redis.call('GET', turn) or '0')
  redis.call('ZADD', rq, 'NX', last_turn, ARGV[6])
  redis.call('ZADD', ready, 'NX', last_turn, ARGV[4] .. ':' .. ARGV[5])
end
redis.call('HSET', cmdkey, 'status', ARGV[7], 'updated_at', ARGV[8])
return 'OK'
