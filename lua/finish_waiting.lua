-- finish_waiting.lua: a waiting command reached a final status without running (cancelled while
-- waiting, max_wait or deadline passed). PostgreSQL has already recorded the status; this
-- mirrors it.
--
-- KEYS[1] count  KEYS[2] q (its resource queue)  KEYS[3] cmd (its status hash)
-- ARGV: 1 id  2 ns  3 cmd  4 status  5 updated_at  6 error_code (optional)  7 error_message (optional)
--       8 retention_ms
--
-- A command between two webhook attempts (retry_wait held by its executor) still holds its
-- permits: they go back here. ARGV[4] may be `needs_review` (a retry_wait whose earlier attempt
-- may have reached the backend, past its deadline): it keeps its share of `unfinished`.
--
-- Exactly-once counting, whoever mirrors first: the waiting counts drop with the queue entry
-- (ZREM), `unfinished` drops with the status hash's move from non-terminal to terminal (an
-- executor that popped the command concurrently counts it out through finish.lua instead).
-- Returns 1 if this call took the command out of its queue.

local count, q, cmdkey = KEYS[1], KEYS[2], KEYS[3]
local id, ns, cmd = ARGV[1], ARGV[2], ARGV[3]
local terminal = {succeeded = true, rejected = true, failed = true, expired = true, cancelled = true}
local removed = redis.call('ZREM', q, id)
if removed == 1 then
  redis.call('HINCRBY', count, 'waiting:' .. ns, -1)
  redis.call('HINCRBY', count, 'queued:' .. ns .. ':' .. cmd, -1)
end
-- Every permit it holds, as admit.lua (or a rebuild) recorded them in `held`.
local held = redis.call('HGET', cmdkey, 'held')
if held then
  for _, lease in ipairs(cjson.decode(held)) do redis.call('ZREM', lease, id) end
  redis.call('HDEL', cmdkey, 'held')
end
local current = redis.call('HGET', cmdkey, 'status')
if current and not terminal[current] and terminal[ARGV[4]] then
  redis.call('HINCRBY', count, 'unfinished', -1)
  -- Outcomes per namespace and second, for the status board (kept two minutes).
  local outcomes = string.match(count, '^(.*):count$') .. ':outcomes:' .. ns .. ':' .. redis.call('TIME')[1]
  redis.call('HINCRBY', outcomes, ARGV[4], 1)
  redis.call('EXPIRE', outcomes, 120)
end
-- A final status is final: a late mirror (a needs_review decided before the result landed)
-- never reopens it, so the command is never counted out twice.
if current and not terminal[current] then
  redis.call('HSET', cmdkey, 'status', ARGV[4], 'updated_at', ARGV[5])
  if ARGV[6] and ARGV[6] ~= '' then
    redis.call('HSET', cmdkey, 'error_code', ARGV[6], 'error_message', ARGV[7] or '')
  end
  -- A needs_review command is not over: its status stays readable until it is.
  if terminal[ARGV[4]] then redis.call('PEXPIRE', cmdkey, tonumber(ARGV[8])) end
end
return removed
