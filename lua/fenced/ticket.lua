-- ticket.lua: everything a ticket poll shows, in one round trip; it writes only to mark a
-- projection found in another Redis process not ready (lib/epoch.lua).
--
-- KEYS[1] meta  KEYS[2] cmd (status hash)  KEYS[3] starts (admit.lua's start rate per queue)
-- KEYS[4 ..] (optional) the queue the caller expects the command to wait in
-- Returns {ready, generation, status, rank, updated_at, accepted_at, deadline_at, result,
--          error_code, error_message, now_ms, starts, suffix}; status is false when the
-- command is not projected; starts is the start record of the command's queue while it waits
-- there ("<decayed> <at_ms> <born_ms> <cap>", false before the queue's first start): the rate
-- that turns its position into an ETA, computed at now_ms by durable/redis/src/start_rate.rs.
-- One HGET: the rate is kept up to date by admit.lua, so a poll costs no more with a long queue
-- or a long drain. The queue a waiting command is in is named by its status hash (field `q`);
-- the script reads it only when the caller passed that key (every key in KEYS), and otherwise
-- answers {"KEYS", queue} (lib/asked_keys.lua): the caller calls again with it. The queue's suffix after ':q:' names its field in
-- KEYS[3]. `suffix` (false unless the command waits) teaches the gateway which queue a ticket's
-- queue tag stands for, so its later polls can be answered from the gateway's memory
-- (gateway/src/polls/waiting_view.rs), and the next poll here passes the queue at once.

-- Trusted only in the Redis process that built or verified the projection (lib/epoch.lua): a
-- Redis restarted from an older snapshot still says ready at the same generation, with its
-- queues as they were then, so a rank read there is not the truth. Such a process is marked
-- not ready here as by any life-cycle script, and this answers not ready.
local trusted = epoch_check(KEYS[1], 0, epoch_now())
local m = {trusted and '1' or '0', trusted and tostring(trusted) or false}
local h = redis.call('HMGET', KEYS[2], 'status', 'q', 'updated_at', 'accepted_at', 'deadline_at',
  'result', 'error_code', 'error_message')
local rank = false
local starts = false
local suffix = false
if (h[1] == 'accepted' or h[1] == 'retry_wait') and h[2] then
  if not declared(h[2]) then return keys_answer({h[2]}) end
  rank = redis.call('ZRANK', h[2], string.match(KEYS[2], ':cmd:(.+)$'))
  suffix = string.match(h[2], ':q:(.+)$') or false
  if rank and suffix then
    starts = redis.call('HGET', KEYS[3], suffix)
  end
end
local t = redis.call('TIME')
return {m[1] or false, m[2] or false, h[1] or false, rank, h[3] or false, h[4] or false,
  h[5] or false, h[6] or false, h[7] or false, h[8] or false,
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), starts, rank and suffix}
