-- start_tokens.lua: start tokens for another attempt of a command that already holds its permits
-- (a webhook retried after 429, 5xx or a timeout). Each rate-limited limit key counts requests
-- to its provider, so a retry takes one token from each of its buckets: all of them, or none.
--
-- KEYS[1] meta  KEYS[1 + i] a limit key's start bucket  ARGV[2i-1] its per_second  ARGV[2i] its
-- burst
-- Returns "NOT_READY" while the projection is not trusted (a rolled-back bucket would have
-- refilled), 0 when the tokens were taken, otherwise the milliseconds until every bucket has one.

local now = epoch_now()
if not epoch_check(KEYS[1], 0, now) then return 'NOT_READY' end
local buckets = {}
for i = 2, #KEYS do buckets[#buckets + 1] = KEYS[i] end
local tokens, wait = {}, 0
for i, bucket in ipairs(buckets) do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local b = redis.call('HMGET', bucket, 'tokens', 'ts')
  local have = bucket_tokens(b[1], b[2], rate, burst, now)
  tokens[i] = have
  if have < 1 then wait = math.max(wait, math.ceil((1 - have) * 1000 / rate)) end
end
if wait > 0 then return wait end
for i, bucket in ipairs(buckets) do
  local rate, burst = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  redis.call('HSET', bucket, 'tokens', tostring(tokens[i] - 1), 'ts', now)
  redis.call('PEXPIRE', bucket, math.ceil((burst - tokens[i] + 1) * 1000 / rate) + 1000)
end
return 0
