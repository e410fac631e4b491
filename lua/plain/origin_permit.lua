-- origin_permit.lua: one permit to call an origin, within the application's budgets across
-- every gateway: concurrent calls (a lease zset, so a dead gateway's permit lapses) and calls
-- per second (a token bucket on Redis time, burst = one second's worth).
--
-- KEYS[1] origin leases (zset: permit -> expiry ms)  KEYS[2] origin bucket (hash)
-- ARGV: 1 permit id  2 most concurrent calls  3 calls per second  4 lease ms
-- Returns {1} when taken, {0, 'concurrency'} or {0, 'rate', wait_ms} when not.
-- Released with ZREM of the permit (or by expiry).

local leases, bucket = KEYS[1], KEYS[2]
local limit, rate, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if redis.call('ZCARD', leases) >= limit then return {0, 'concurrency'} end

local b = redis.call('HMGET', bucket, 'tokens', 'at')
local tokens = tonumber(b[1] or rate)
local at = tonumber(b[2] or now)
tokens = math.min(rate, tokens + (now - at) * rate / 1000)
if tokens < 1 then return {0, 'rate', math.ceil((1 - tokens) * 1000 / rate)} end
redis.call('HSET', bucket, 'tokens', tokens - 1, 'at', now)
redis.call('PEXPIRE', bucket, 60000)
redis.call('ZADD', leases, now + lease_ms, ARGV[1])
-- The set outlives its longest permit (permits of reads with other timeouts may outlast this
-- one: an expiry set from this lease alone could drop them while their calls still run).
local last = redis.call('ZRANGE', leases, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', leases, math.max(now + lease_ms, tonumber(last[2])) + 1000)
return {1}
