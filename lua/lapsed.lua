-- lapsed.lua: the permits of a command whose lease has run out by Redis time (their holder died
-- or stalled), for the executors' sweeper to reconcile with PostgreSQL. Read-only.
--
-- KEYS[1] the command's admission lease zset  ARGV[1] at most this many
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
