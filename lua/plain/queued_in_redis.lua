-- queued_in_redis.lua: how far each of some commands PostgreSQL holds as waiting is projected, for the
-- reconciler. Read-only.
--
-- KEYS: pairs (cmd status hash, its resource queue) per command; ARGV[i] the i-th command's id.
-- Returns per command: its projected status (false when the status hash is missing) and 1 if it
-- is in its queue, else 0: {status_1, queued_1, status_2, queued_2, ...}.
local answer = {}
for i = 1, #ARGV do
  answer[#answer + 1] = redis.call('HGET', KEYS[2 * i - 1], 'status') or false
  answer[#answer + 1] = redis.call('ZSCORE', KEYS[2 * i], ARGV[i]) and 1 or 0
end
return answer
