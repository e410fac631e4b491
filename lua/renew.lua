-- renew.lua: extend the permits an executor still holds while its handlers work.
--
-- KEYS[i] a lease zset; ARGV[1] lease_ms; ARGV[i + 1] the member to extend in KEYS[i].
-- XX: a permit that already lapsed (and may have been handed to someone else) is never
-- resurrected; the executor's PostgreSQL lease decides whether its result still lands.
-- GT: a renewal only ever extends: a running webhook command's permits, extended to its
-- deadline, are never shortened by a routine renewal racing that extension.
-- Returns how many permits were extended.

local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local renewed = 0
for i, key in ipairs(KEYS) do
  renewed = renewed + redis.call('ZADD', key, 'XX', 'GT', 'CH', expiry, ARGV[i + 1])
end
return renewed
