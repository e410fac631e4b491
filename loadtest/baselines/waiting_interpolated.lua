-- The pull of waiting.lua before its runs (sluice-bench-waiting's baseline): each queue's
-- count, head and tail only, from which the gateway interpolated positions.
--
-- waiting.lua: what a gateway needs to answer waiting polls from memory (the pull of
-- gateway/src/polls/waiting_view.rs, at most every 100 ms per application while polls arrive), in
-- one round trip and without writes. See "Waiting polls" in lua/README.md.
--
-- KEYS[1] meta  KEYS[2] seq (the application's queue sequence)  KEYS[3] started (admit.lua:
-- queue suffix -> highest sequence started)  KEYS[4] starts (admit.lua's start records)
-- KEYS[5] gone (lib/epoch.lua's record of commands that left a queue without starting)
-- KEYS[6 ..] the resource queues asked about
-- ARGV[1] gone cursor (the last entry number the caller read; 0: none)  ARGV[2] at most this
-- many gone entries  ARGV[3 ..] the queues' suffixes, in the order of KEYS[6 ..]
--
-- Returns {ready, generation, now_ms, app_seq, gone_low, gone_high, gone, queues}:
--   gone_low/gone_high: the lowest and highest entry numbers kept (0 when none); the caller
--     missed entries when gone_low > cursor + 1 (trimmed) or when it read fewer than
--     gone_high - cursor;
--   gone: {member, number, ...} of the entries after the cursor, oldest first, at most ARGV[2];
--   queues: per queue asked, {started, waiting, head, tail, start_record}: started is false
--     while the queue has no start on record (then nothing about it can be told from memory),
--     head and tail are the lowest and highest sequences waiting (false when empty).
-- Everything is read at one instant, so the gone entries and the queues agree.

local m = redis.call('HMGET', KEYS[1], 'ready', 'generation')
local t = redis.call('TIME')
local app_seq = tonumber(redis.call('GET', KEYS[2]) or '0')
local low = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
local high = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT',
  0, tonumber(ARGV[2]))
local queues = {}
for i = 6, #KEYS do
  local suffix = ARGV[i - 3]
  local head = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  local tail = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  queues[#queues + 1] = {redis.call('HGET', KEYS[3], suffix) or false,
    redis.call('ZCARD', KEYS[i]), head[2] or false, tail[2] or false,
    redis.call('HGET', KEYS[4], suffix) or false}
end
return {m[1] or false, m[2] or false,
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), app_seq,
  tonumber(low[2]) or 0, tonumber(high[2]) or 0, gone, queues}
