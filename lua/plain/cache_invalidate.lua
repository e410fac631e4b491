-- cache_invalidate.lua: bump dependency versions, so every cached read filled under an older
-- version is a miss from now on (no key is scanned or deleted), and tell the gateways to drop
-- their in-process copies.
--
-- KEYS[1..] dependency version keys
-- ARGV: 1 channel  2 message (who: `<application>:<namespace>`)
-- Returns the new versions, in KEYS order.

local versions = {}
for i = 1, #KEYS do versions[i] = redis.call('INCR', KEYS[i]) end
redis.call('PUBLISH', ARGV[1], ARGV[2])
return versions
