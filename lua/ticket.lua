-- ticket.lua: everything a ticket poll shows, in one round trip and without writes.
--
-- KEYS[1] meta  KEYS[2] cmd (status hash)
-- Returns {ready, generation, status, rank, updated_at, accepted_at, deadline_at, result,
--          error_code, error_message, now_ms}; status is false when the command is not projected.
-- The queue key is read from the status hash; it carries the same hash tag (same slot).

local m = redis.call('HMGET', KEYS[1], 'ready', 'generation')
local h = redis.call('HMGET', KEYS[2], 'status', 'q', 'updated_at', 'accepted_at', 'deadline_at',
  'result', 'error_code', 'error_message')
local rank = false
if h[1] == 'accepted' and h[2] then
  rank = redis.call('ZRANK', h[2], string.match(KEYS[2], ':cmd:(.+)$'))
end
local t = redis.call('TIME')
return {m[1] or false, m[2] or false, h[1] or false, rank, h[3] or false, h[4] or false,
  h[5] or false, h[6] or false, h[7] or false, h[8] or false,
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
