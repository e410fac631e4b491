-- usage.lua: an application's live usage for `GET /v1/application/resources`, read at one
-- Redis time. Read-only.
--
-- KEYS[1] meta  KEYS[2] count  KEYS[3] the application's executing permits (lease zset)
-- Returns {ready, unfinished, live_permits}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {redis.call('HGET', KEYS[1], 'ready') or false,
        tonumber(redis.call('HGET', KEYS[2], 'unfinished') or '0'),
        redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')}
