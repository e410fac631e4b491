-- ticket.lua: everything a ticket poll shows, in one round trip and without writes.
--
-- KEYS[1] meta  KEYS[2] cmd (status hash)
-- Returns {ready, generation, status, rank, updated_at, accepted_at, deadline_at, result,
--          error_code, error_message, now_ms, drained}; status is false when the command is not
-- projected; drained counts its command's completions over the last 10 seconds (the drain rate
-- that turns a queue position into an ETA).
-- The queue key is read from the status hash; it carries the same hash tag (same slot).

local m = redis.call('HMGET', KEYS[1], 'ready', 'generation')
local h = redis.call('HMGET', KEYS[2], 'status', 'q', 'updated_at', 'accepted_at', 'deadline_at',
  'result', 'error_code', 'error_message', 'ns', 'cmd')
local rank = false
if h[1] == 'accepted' and h[2] then
  rank = redis.call('ZRANK', h[2], string.match(KEYS[2], ':cmd:(.+)$'))
end
local t = redis.call('TIME')
local drained = 0
if rank and h[9] and h[10] then
  local prefix = string.sub(KEYS[1], 1, #KEYS[1] - 5)
  local second = tonumber(t[1])
  local names = {}
  for s = second - 10, second - 1 do
    names[#names + 1] = prefix .. ':drain:' .. h[9] .. ':' .. h[10] .. ':' .. s
  end
  for _, v in ipairs(redis.call('MGET', unpack(names))) do
    drained = drained + (tonumber(v) or 0)
  end
end
return {m[1] or false, m[2] or false, h[1] or false, rank, h[3] or false, h[4] or false,
  h[5] or false, h[6] or false, h[7] or false, h[8] or false,
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), drained}
