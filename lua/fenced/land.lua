-- land.lua: a command's end, after PostgreSQL committed it (transition `land`, and the Redis side
-- of `cancel`, `complete`, `rescue` and `expire`): whatever Redis thought of the command —
-- waiting in its queue, started with permits, running — it ends here.
--
-- KEYS[1] meta  KEYS[2] count  KEYS[3] cmd (status hash)  KEYS[4] its resource queue
-- KEYS[5] gone (lib/epoch.lua's gone record)  KEYS[6] seq (the application's queue sequence)
-- KEYS[7] outcomes (the namespace's ring of outcomes per second)
-- KEYS[8 ..] the permits the command may hold (lib/epoch.lua's declared permits)
-- ARGV: 1 id  2 ns  3 cmd  4 status  5 updated_at  6 result (JSON text or "")  7 error_code
--       8 error_message  9 retention_ms
--
-- ARGV[4] is a final status, or `needs_review`: the outcome is unknown, the permits go back, but
-- the command keeps its share of `unfinished` until an authoritative result (or an operator)
-- ends it.
--
-- Exactly-once counting, whoever lands first: the waiting counts drop with the queue entry
-- (ZREM); `unfinished` drops with the status hash's move from a non-final status to a final one.
-- A final status is final: a late landing (a `needs_review` decided before the result landed)
-- never reopens it. A missing status hash means the command was never counted in (its
-- commit's projection has not run yet, or a rebuild after the end did not project it): the
-- final status is written for ticket polls without counting, and a late accept.lua, finding the
-- hash, does not queue it. Permits are zset members, so releasing twice changes nothing.
-- The same transition counts the outcome in the namespace's ring `<prefix>:outcomes:<ns>`, read
-- by the status board: a hash of OUTCOME_SLOTS slots, one per second (slot = second mod
-- OUTCOME_SLOTS), each field `<slot>:at` the second the slot holds and `<slot>:<status>` its
-- count; a slot found holding an older second is emptied first. One key per namespace, so the
-- caller can name it in KEYS (a hash per second could not be named before Redis's clock is
-- read). (Ticket ETAs no longer read completions: they follow the starts admit.lua records.)
--
-- A command that ends without having started (out of its queue here, or ended before
-- accept.lua ever queued it: no status hash yet) is added to the gone record, so gateways that
-- answer its ticket's polls from memory see it end within one refresh; its queue score is its
-- sequence, and one never queued records the application's sequence (an upper bound).
--
-- Returns "NOT_READY" while the projection is not trusted (the caller lands again once it is:
-- a rebuild meanwhile may or may not have seen the end), {"KEYS", key, ...} when it holds
-- permits not in KEYS (nothing done), else 1 when this call counted the command out of
-- `unfinished`, 0 otherwise.

local meta, count, cmdkey, q = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- Seconds the ring of outcomes holds (the status board reads the last ten, status_board.lua).
local OUTCOME_SLOTS = 120
local function count_outcome(ring, second, status)
  local slot = second % OUTCOME_SLOTS
  if redis.call('HGET', ring, slot .. ':at') ~= tostring(second) then
    redis.call('HDEL', ring, slot .. ':succeeded', slot .. ':rejected', slot .. ':failed',
      slot .. ':expired', slot .. ':cancelled')
    redis.call('HSET', ring, slot .. ':at', second)
  end
  redis.call('HINCRBY', ring, slot .. ':' .. status, 1)
  -- A namespace without endings for the ring's span keeps nothing.
  redis.call('EXPIRE', ring, OUTCOME_SLOTS)
end
local now = epoch_now()
if not epoch_check(meta, 0, now) then return 'NOT_READY' end
local id, ns, cmd, status = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local missing = undeclared_held(redis.call('HGET', cmdkey, 'held'), {})
if #missing > 0 then return keys_answer(missing) end

local queued_seq = redis.call('ZSCORE', q, id)
if queued_seq then
  redis.call('ZREM', q, id)
  redis.call('HINCRBY', count, 'waiting:' .. ns, -1)
  redis.call('HINCRBY', count, 'queued:' .. ns .. ':' .. cmd, -1)
end
release_held(cmdkey, id)

local current = redis.call('HGET', cmdkey, 'status')
if queued_seq then
  gone_add(KEYS[5], id, queued_seq)
elseif not current then
  gone_add(KEYS[5], id, redis.call('GET', KEYS[6]) or '0')
end
if current and TERMINAL[current] then return 0 end
local counted = 0
if TERMINAL[status] then
  if current then
    redis.call('HINCRBY', count, 'unfinished', -1)
    count_outcome(KEYS[7], math.floor(now / 1000), status)
    counted = 1
  end
elseif not current then
  -- needs_review of a command Redis never counted in: nothing to keep a share of.
  return 0
end
redis.call('HSET', cmdkey, 'status', status, 'updated_at', ARGV[5], 'ns', ns, 'cmd', cmd)
if ARGV[6] ~= '' then redis.call('HSET', cmdkey, 'result', ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', cmdkey, 'error_code', ARGV[7], 'error_message', ARGV[8]) end
-- A needs_review command is not over: its status stays readable until it is.
if TERMINAL[status] then redis.call('PEXPIRE', cmdkey, tonumber(ARGV[9])) end
return counted
