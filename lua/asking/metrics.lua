-- metrics.lua: one application's projection figures for `GET /metrics`, read at one Redis time
-- in one round trip. Read-only.
--
-- KEYS[1] meta  KEYS[2] count  KEYS[3] cfg  KEYS[4] the application's executing permits (lease zset)
-- KEYS[5 ..] the commands' executing permits (lease zsets)
-- Returns {generation, ready, unfinished, live application permits,
--          "<ns>:<cmd>", queued, live command permits, "<ns>:<cmd>", ...}; generation and ready
-- are false when `meta` lacks them (no projection). Or {"KEYS", key, ...} when a command's
-- lease zset is not in KEYS (nothing counted): the caller calls again with them
-- (durable/redis/src/asked_keys.rs).
--
-- The commands are those with a `queued:<ns>:<cmd>` counter (every command that ever took a
-- reservation) and those with an admission spec in `cfg` (every command an executor can run);
-- each command's permits are the live members (expiry > now) of `{a:ID}:lease:cmd:<ns>:<cmd>`,
-- named under the meta key's hash tag like admit.lua does, so it stays in the same slot.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function live(lease)
  return redis.call('ZCOUNT', lease, '(' .. now, '+inf')
end
local prefix = string.sub(KEYS[1], 1, #KEYS[1] - 5)  -- "{a:ID}" from "{a:ID}:meta"
local m = redis.call('HMGET', KEYS[1], 'generation', 'ready')
local answer = {m[1] or false, m[2] or false,
  tonumber(redis.call('HGET', KEYS[2], 'unfinished') or '0'), live(KEYS[4])}

local queued, order = {}, {}
local counts = redis.call('HGETALL', KEYS[2])
for i = 1, #counts, 2 do
  local nscmd = string.match(counts[i], '^queued:(.+)$')
  if nscmd then
    order[#order + 1] = nscmd
    queued[nscmd] = tonumber(counts[i + 1]) or 0
  end
end
for _, field in ipairs(redis.call('HKEYS', KEYS[3])) do
  if string.sub(field, 1, 4) ~= 'lim:' and queued[field] == nil then
    order[#order + 1] = field
    queued[field] = 0
  end
end
local missing = {}
for _, nscmd in ipairs(order) do ask_for(prefix .. ':lease:cmd:' .. nscmd, missing) end
if #missing > 0 then return keys_answer(missing) end
for _, nscmd in ipairs(order) do
  answer[#answer + 1] = nscmd
  answer[#answer + 1] = queued[nscmd]
  answer[#answer + 1] = live(prefix .. ':lease:cmd:' .. nscmd)
end
return answer
