-- renew.lua: extend the permits of attempts an executor still runs (transition `renew`).
--
-- KEYS[1] meta  KEYS[1 + i] the status hash of the i-th attempt's command (i = 1 .. n)
-- KEYS[n + 2 ..] the permits the commands may hold (lib/epoch.lua's declared permits)
-- ARGV: 1 lease_ms  then per attempt: id, attempt (ARGV[2i], ARGV[2i + 1])
--
-- Fenced by the attempt: only the attempt Redis has on record for the command is renewed, and
-- only permits that are still live (expiry after now): a permit that lapsed may already have
-- been handed to another command, so renewing it would count one command twice against its
-- limit. An attempt that is not on record any more, or one of whose permits lapsed or is gone,
-- is lost: the executor stops it, and it cannot land (PostgreSQL fences it too).
-- GT: a renewal only ever extends: a running command's permits, extended to its deadline, are
-- never shortened by a routine renewal racing that extension.
-- Returns "NOT_READY", {"KEYS", key, ...} (permits held that are not in KEYS: nothing done), or
-- per attempt 1 (every permit extended) or 0 (lost).

local meta = KEYS[1]
local now = epoch_now()
if not epoch_check(meta, 0, now) then return 'NOT_READY' end
local expiry = now + tonumber(ARGV[1])
local n = (#ARGV - 1) / 2
-- Every command's record first: its permits must be declared before any is read.
local records, missing = {}, {}
for i = 1, n do
  records[i] = redis.call('HMGET', KEYS[1 + i], 'attempt', 'held', 'status')
  if records[i][1] == ARGV[2 * i + 1] then undeclared_held(records[i][2], missing) end
end
if #missing > 0 then return keys_answer(missing) end
local answer = {}
for i = 1, n do
  local id, attempt, h = ARGV[2 * i], ARGV[2 * i + 1], records[i]
  local ok = h[1] == attempt and h[2] ~= false and not TERMINAL[h[3] or '']
  local leases = ok and cjson.decode(h[2]) or {}
  for _, lease in ipairs(leases) do
    local score = tonumber(redis.call('ZSCORE', lease, id) or '')
    if score == nil or score <= now then ok = false end
  end
  if ok then
    for _, lease in ipairs(leases) do redis.call('ZADD', lease, 'XX', 'GT', expiry, id) end
  end
  answer[#answer + 1] = ok and 1 or 0
end
return answer
