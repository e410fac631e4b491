-- ticket.lua: everything a ticket poll shows, in one round trip and without writes.
--
-- KEYS[1] meta  KEYS[2] cmd (status hash)
-- Returns {ready, generation, status, rank, updated_at, accepted_at, deadline_at, result,
--          error_code, error_message, now_ms, drain_millis}; status is false when the command is
-- not projected; drain_millis is its command's completions per 1000 seconds, measured over the
-- last 10 seconds or since the first completion in them if that is later (a drain that just
-- started is not diluted by the idle seconds before it). It turns a position into an ETA.
-- The queue key is read from the status hash; it carries the same hash tag (same slot).

local m = redis.call('HMGET', KEYS[1], 'ready', 'generation')
local h = redis.call('HMGET', KEYS[2], 'status', 'q', 'updated_at', 'accepted_at', 'deadline_at',
  'result', 'error_code', 'error_message', 'ns', 'cmd')
local rank = false
if (h[1] == 'accepted' or h[1] == 'retry_wait') and h[2] then
  rank = redis.call('ZRANK', h[2], string.match(KEYS[2], ':cmd:(.+)$'))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local drain_millis = 0
if rank and h[9] and h[10] then
  local prefix = string.sub(KEYS[1], 1, #KEYS[1] - 5)
  local second = tonumber(t[1])
  local names = {}
  for s = second - 10, second do
    names[#names + 1] = prefix .. ':drain:' .. h[9] .. ':' .. h[10] .. ':' .. s
  end
  local total, oldest = 0, nil
  for i, v in ipairs(redis.call('MGET', unpack(names))) do
    local n = tonumber(v) or 0
    if n > 0 and oldest == nil then oldest = second - 11 + i end
    total = total + n
  end
  if oldest then
    drain_millis = math.floor(total * 1000 / math.max(1, now - oldest))
  end
end
return {m[1] or false, m[2] or false, h[1] or false, rank, h[3] or false, h[4] or false,
  h[5] or false, h[6] or false, h[7] or false, h[8] or false,
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), drain_millis}
