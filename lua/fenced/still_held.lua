-- still_held.lua: whether attempts still hold their commands, for the lease sweeper (transition
-- `rescue`). A row whose lease lapsed in PostgreSQL is rescued only once its attempt's permits
-- have lapsed in Redis too: an attempt that still renews them is alive (PostgreSQL was only
-- out of its reach), and its request may be at its backend. Reads only.
--
-- KEYS[1] meta  KEYS[1 + i] the status hash of the i-th command (i = 1 .. n)
-- KEYS[n + 2 ..] the permits the commands may hold (lib/epoch.lua's declared permits)
-- ARGV[2i - 1], ARGV[2i]: the i-th command's id and attempt
-- Returns "NOT_READY" (nothing can be told: rescue nothing), {"KEYS", key, ...} (permits held
-- that are not in KEYS: nothing told), or per command 1 (its attempt is on record and every
-- permit it holds is live) or 0.

if not epoch_check(KEYS[1], 0, epoch_now()) then return 'NOT_READY' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #ARGV / 2
-- Every command's record first: its permits must be declared before any is read.
local records, missing = {}, {}
for i = 1, n do
  records[i] = redis.call('HMGET', KEYS[1 + i], 'attempt', 'held')
  if records[i][1] == ARGV[2 * i] then undeclared_held(records[i][2], missing) end
end
if #missing > 0 then return keys_answer(missing) end
local answer = {}
for i = 1, n do
  local id, attempt, h = ARGV[2 * i - 1], ARGV[2 * i], records[i]
  local holds = h[1] == attempt and h[2] ~= false
  if holds then
    for _, lease in ipairs(cjson.decode(h[2])) do
      local score = tonumber(redis.call('ZSCORE', lease, id) or '')
      if score == nil or score <= now then holds = false end
    end
  end
  answer[#answer + 1] = holds and 1 or 0
end
return answer
