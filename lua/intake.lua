-- intake.lua: one admission decision for one enqueue, atomically.
--
-- KEYS[1] meta      hash  generation, ready, paused:<ns>, paused:<ns>:<cmd>, app:max_unfinished
-- KEYS[2] count     hash  unfinished, waiting:<ns>, queued:<ns>:<cmd>
-- KEYS[3] bucket    hash  intake token bucket of the command: tokens, ts (ms)
-- KEYS[4] resv      zset  reservations (= intake in-flight) of the command, score = expiry ms
-- KEYS[5] rk        hash  "<subject-len>:<subject><request_key>" -> "<id> <sha256hex> <p|c>"
-- KEYS[6] seq       string application-wide queue sequence
-- KEYS[7] sbucket   hash  the subject's own intake bucket of the command: tokens, ts (ms)
--
-- ARGV: 1 min_generation  2 ns  3 cmd  4 rk_field  5 content_sha256_hex  6 new_command_id
--       7 max_unfinished  8 max_waiting_ns  9 max_queue_cmd  10 per_second  11 burst
--       12 max_in_flight  13 reservation_ttl_ms  14 per_subject_per_second (0: none)
--       15 per_subject_burst
--
-- Answers (first element is the verdict):
--   {"NOT_READY"}                         projection missing or older than PostgreSQL's
--   {"REPLAY", id, "c"|"p"}               same key, same content: committed or still pending
--   {"CONFLICT", id}                      same key, other content
--   {"PAUSED", "namespace"|"command"}
--   {"APPLICATION_FULL"} {"QUEUE_FULL"}   backlog caps, outermost first
--   {"RATE_LIMITED", retry_after_ms}      a bucket empty (real wait) or in-flight full
--   {"RESERVED", seq, now_ms, generation}
-- Every refusal returns before the first write, so it leaves nothing behind (the epoch
-- prelude may record its own verification in `meta`).
-- The generation returned with a reservation is the epoch it belongs to: the commit is fenced
-- on it, so a reservation made before a rebuild can never commit after the rebuild's snapshot.

local meta, count, bucket, resv, rk, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local sbucket = KEYS[7]
local ns, cmd, field, digest, id = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

local now = epoch_now()

-- 1. The projection must be trusted (lib/epoch.lua) and at least as new as PostgreSQL's.
local generation = epoch_check(meta, tonumber(ARGV[1]), now)
if not generation then
  return {'NOT_READY'}
end
local m = redis.call('HMGET', meta, 'paused:' .. ns, 'paused:' .. ns .. ':' .. cmd,
  'app:max_unfinished')

local waiting_field = 'waiting:' .. ns
local queued_field = 'queued:' .. ns .. ':' .. cmd

-- 2. Expired reservations belong to gateways that died mid-enqueue: give their counts back
--    (bounded work per call; leftovers only make caps tighter until the next call).
local expired = redis.call('ZRANGEBYSCORE', resv, '-inf', now, 'LIMIT', 0, 16)
for _, member in ipairs(expired) do
  local sep = string.find(member, ' ', 1, true)
  local rid, rfield = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
  redis.call('HINCRBY', count, 'unfinished', -1)
  redis.call('HINCRBY', count, waiting_field, -1)
  redis.call('HINCRBY', count, queued_field, -1)
  local cur = redis.call('HGET', rk, rfield)
  if cur and cur == (rid .. ' ' .. string.sub(cur, 38, 101) .. ' p') then
    redis.call('HDEL', rk, rfield)
  end
  redis.call('ZREM', resv, member)
end

-- 3. Replay of a known request key is answered even when everything is full or paused.
local known = redis.call('HGET', rk, field)
if known then
  local kid, kdigest, kstate = string.sub(known, 1, 36), string.sub(known, 38, 101), string.sub(known, 103)
  if kdigest ~= digest then
    return {'CONFLICT', kid}
  end
  return {'REPLAY', kid, kstate}
end

-- 4. Operator pause.
if m[1] == '1' then return {'PAUSED', 'namespace'} end
if m[2] == '1' then return {'PAUSED', 'command'} end

-- 5. Backlog caps, outermost first. Reservations are already inside these counts.
local c = redis.call('HMGET', count, 'unfinished', waiting_field, queued_field)
-- The application's limit as last configured (app_limits.lua); the caller's copy until then.
local max_unfinished = tonumber(m[3] or ARGV[7])
if tonumber(c[1] or '0') >= max_unfinished then return {'APPLICATION_FULL'} end
if tonumber(c[2] or '0') >= tonumber(ARGV[8]) then return {'QUEUE_FULL'} end
if tonumber(c[3] or '0') >= tonumber(ARGV[9]) then return {'QUEUE_FULL'} end

-- 6. The subject's own bucket first, so one person cannot spend the command's shared bucket
--    (nor be told to wait for others): refilled like it, and only read here.
local srate, sburst = tonumber(ARGV[14]), tonumber(ARGV[15])
local stokens
if srate > 0 then
  local sb = redis.call('HMGET', sbucket, 'tokens', 'ts')
  stokens = bucket_tokens(sb[1], sb[2], srate, sburst, now)
  if stokens < 1 then
    return {'RATE_LIMITED', math.ceil((1 - stokens) * 1000 / srate)}
  end
end

-- 6b. The command's intake token bucket, refilled continuously from Redis time (lib/epoch.lua).
local rate, burst = tonumber(ARGV[10]), tonumber(ARGV[11])
local b = redis.call('HMGET', bucket, 'tokens', 'ts')
local tokens = bucket_tokens(b[1], b[2], rate, burst, now)
if tokens < 1 then
  return {'RATE_LIMITED', math.ceil((1 - tokens) * 1000 / rate)}
end

-- 7. Intake in-flight: live reservations of this command.
if redis.call('ZCARD', resv) >= tonumber(ARGV[12]) then
  return {'RATE_LIMITED', 50}
end

-- Admit: take the token, reserve, count, remember the pending key, hand out the sequence.
tokens = tokens - 1
redis.call('HSET', bucket, 'tokens', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', bucket, math.ceil((burst - tokens) * 1000 / rate) + 1000)
if stokens then
  -- Expires once full again: a subject that stops asking leaves nothing behind.
  stokens = stokens - 1
  redis.call('HSET', sbucket, 'tokens', tostring(stokens), 'ts', now)
  redis.call('PEXPIRE', sbucket, math.ceil((sburst - stokens) * 1000 / srate) + 1000)
end
redis.call('ZADD', resv, now + tonumber(ARGV[13]), id .. ' ' .. field)
redis.call('HINCRBY', count, 'unfinished', 1)
redis.call('HINCRBY', count, waiting_field, 1)
redis.call('HINCRBY', count, queued_field, 1)
redis.call('HSET', rk, field, id .. ' ' .. digest .. ' p')
local s = redis.call('INCR', seq)
return {'RESERVED', s, now, generation}
