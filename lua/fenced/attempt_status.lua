-- attempt_status.lua: the status of a started command as its attempt moves on (transitions `attempt`
-- (executing again after a retry wait, or waiting for the retry) and `running`).
--
-- KEYS[1] meta  KEYS[2] cmd (status hash)
-- KEYS[3 ..] the permits the command may hold (lib/epoch.lua's declared permits), when it
-- extends them
-- ARGV: 1 id  2 attempt  3 status (executing | retry_wait | running)  4 updated_at
--       5 extend_ms: 0, or how long from now every permit the command holds must last (a
--         `running` command holds its permits until its deadline, and nobody renews them)
--       6 "restore" (optional): permits that lapsed or are gone are put back too
--
-- Fenced by the attempt, and a final status or `needs_review` is never overwritten: a late mark
-- changes nothing. An extension needs every permit still live (a lapsed one may have been handed
-- to another command): otherwise nothing is written and the attempt is lost. Only the permit
-- sweeper restores, and only for a command PostgreSQL has running: its backend has it, so its
-- permits count whatever Redis lost (at worst the limit is full until it ends, never exceeded
-- by starts after this).
-- Returns "NOT_READY", {"KEYS", key, ...} (an extension of permits not in KEYS: nothing done),
-- 1 (marked) or 0 (not this attempt's any more, or a permit lapsed).

local meta, cmdkey = KEYS[1], KEYS[2]
local now = epoch_now()
if not epoch_check(meta, 0, now) then return 'NOT_READY' end
local id = ARGV[1]
local h = redis.call('HMGET', cmdkey, 'status', 'attempt', 'held')
if not h[1] or TERMINAL[h[1]] or h[1] == 'needs_review' or h[2] ~= ARGV[2] then return 0 end
local extend = tonumber(ARGV[5])
if extend > 0 then
  local missing = undeclared_held(h[3], {})
  if #missing > 0 then return keys_answer(missing) end
  local leases = h[3] and cjson.decode(h[3]) or {}
  local restore = ARGV[6] == 'restore'
  for _, lease in ipairs(leases) do
    local score = tonumber(redis.call('ZSCORE', lease, id) or '')
    if not restore and (score == nil or score <= now) then return 0 end
  end
  for _, lease in ipairs(leases) do
    if restore then
      redis.call('ZADD', lease, 'GT', now + extend, id)
    else
      redis.call('ZADD', lease, 'XX', 'GT', now + extend, id)
    end
  end
end
redis.call('HSET', cmdkey, 'status', ARGV[3], 'updated_at', ARGV[4])
return 1
