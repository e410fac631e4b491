-- permit_holders.lua: who holds a command's permits, for the permit sweeper to reconcile with
-- PostgreSQL (a command that ended while its landing could not reach Redis, a running command
-- whose extension was lost, a head admitted by an executor that died before its claim). Reads
-- only.
--
-- KEYS[1] the command's admission lease zset  KEYS[2 ..] the status hashes of its holders
-- ARGV[1] at most this many, oldest expiry first  ARGV[2] the status hash prefix "{a:ID}:cmd:"
-- Returns {id, live (1 | 0), attempt | false, status | false, ...}, or {"KEYS", key, ...} when
-- a holder's status hash is not in KEYS (nothing read of it): the caller calls again with them
-- (durable/redis/src/asked_keys.rs).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local missing = {}
for i = 1, #members, 2 do ask_for(ARGV[2] .. members[i], missing) end
if #missing > 0 then return keys_answer(missing) end
local answer = {}
for i = 1, #members, 2 do
  local id = members[i]
  local h = redis.call('HMGET', ARGV[2] .. id, 'attempt', 'status')
  answer[#answer + 1] = id
  answer[#answer + 1] = tonumber(members[i + 1]) > now and 1 or 0
  answer[#answer + 1] = h[1]
  answer[#answer + 1] = h[2]
end
return answer
