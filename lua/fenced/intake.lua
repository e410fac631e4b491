-- intake.lua: the admission decisions of N enqueues of one application, atomically, in order.
--
-- A batch of one is today's single decision; a batch of N decides each entry exactly as N
-- sequential calls at the same Redis time would (entry i sees the writes of entries 1..i-1:
-- tokens taken, counts raised, a request key reserved), so batching changes who waits for the
-- round trip, never who is admitted.
--
-- KEYS[1] meta      hash  generation, ready, paused:<ns>, paused:<ns>:<cmd>, app:max_unfinished
-- KEYS[2] count     hash  unfinished, waiting:<ns>, queued:<ns>:<cmd>
-- KEYS[3] seq       string application-wide queue sequence
-- then per entry i (base = 3 + 4·(i-1)):
-- KEYS[base+1] bucket   hash  intake token bucket of the command: tokens, ts (ms)
-- KEYS[base+2] resv     zset  reservations (= intake in-flight) of the command, score = expiry ms
-- KEYS[base+3] rk       hash  "<subject-len>:<subject><request_key>" -> "<id> <sha256hex> <p|c>"
-- KEYS[base+4] sbucket  hash  the subject's own intake bucket of the command: tokens, ts (ms)
--
-- ARGV per entry i (base = 15·(i-1)): 1 min_generation  2 ns  3 cmd  4 rk_field
--       5 content_sha256_hex  6 new_command_id  7 max_unfinished  8 max_waiting_ns
--       9 max_queue_cmd  10 per_second  11 burst  12 max_in_flight  13 reservation_ttl_ms
--       14 per_subject_per_second (0: none)  15 per_subject_burst
--
-- Answer: one verdict per entry, in order (first element is the verdict):
--   {"NOT_READY"}                         projection missing or older than PostgreSQL's
--   {"REPLAY", id, "c"|"p"}               same key, same content: committed or still pending
--   {"CONFLICT", id}                      same key, other content
--   {"PAUSED", "namespace"|"command"}
--   {"APPLICATION_FULL"} {"QUEUE_FULL"}   backlog caps, outermost first
--   {"RATE_LIMITED", retry_after_ms}      a bucket empty (real wait) or in-flight full
--   {"RESERVED", seq, now_ms, generation}
-- Every refusal of an entry returns before that entry's first write, so it leaves nothing behind
-- (the epoch prelude may record its own verification in `meta`).
-- The generation returned with a reservation is the epoch it belongs to: the commit is fenced
-- on it, so a reservation made before a rebuild can never commit after the rebuild's snapshot.
-- Work per call: one prelude, one bounded sweep (16 members) per distinct command, then per
-- entry at most 4 reads before its verdict and 12 writes when it reserves.

local meta, count, seq = KEYS[1], KEYS[2], KEYS[3]
local ARGS_PER_ENTRY, KEYS_PER_ENTRY = 15, 4
local entries = #ARGV / ARGS_PER_ENTRY

local now = epoch_now()
local answers = {}

-- 1. The projection must be trusted (lib/epoch.lua), once per call; each entry then needs it at
--    least as new as the PostgreSQL generation its caller read.
local generation = epoch_check(meta, 0, now)
if not generation then
  for i = 1, entries do answers[i] = {'NOT_READY'} end
  return answers
end

-- 2. Expired reservations belong to gateways that died mid-enqueue: give their counts back
--    (bounded work per command per call; leftovers only make caps tighter until the next call).
local function sweep(resv, rk, ns, cmd)
  local expired = redis.call('ZRANGEBYSCORE', resv, '-inf', now, 'LIMIT', 0, 16)
  for _, member in ipairs(expired) do
    local sep = string.find(member, ' ', 1, true)
    local rid, rfield = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
    redis.call('HINCRBY', count, 'unfinished', -1)
    redis.call('HINCRBY', count, 'waiting:' .. ns, -1)
    redis.call('HINCRBY', count, 'queued:' .. ns .. ':' .. cmd, -1)
    local cur = redis.call('HGET', rk, rfield)
    if cur and cur == (rid .. ' ' .. string.sub(cur, 38, 101) .. ' p') then
      redis.call('HDEL', rk, rfield)
    end
    redis.call('ZREM', resv, member)
  end
end
local swept = {}

-- One entry's decision: exactly the single-enqueue decision of before.
local function decide(k, a)
  local bucket, resv, rk, sbucket = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local ns, cmd, field, digest, id = ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]
  if generation < tonumber(ARGV[a + 1]) then return {'NOT_READY'} end
  if not swept[resv] then
    swept[resv] = true
    sweep(resv, rk, ns, cmd)
  end

  -- 3. Replay of a known request key is answered even when everything is full or paused.
  local known = redis.call('HGET', rk, field)
  if known then
    local kid, kdigest = string.sub(known, 1, 36), string.sub(known, 38, 101)
    if kdigest ~= digest then
      return {'CONFLICT', kid}
    end
    return {'REPLAY', kid, string.sub(known, 103)}
  end

  -- 4. Operator pause.
  local m = redis.call('HMGET', meta, 'paused:' .. ns, 'paused:' .. ns .. ':' .. cmd,
    'app:max_unfinished')
  if m[1] == '1' then return {'PAUSED', 'namespace'} end
  if m[2] == '1' then return {'PAUSED', 'command'} end

  -- 5. Backlog caps, outermost first. Reservations are already inside these counts.
  local waiting_field = 'waiting:' .. ns
  local queued_field = 'queued:' .. ns .. ':' .. cmd
  local c = redis.call('HMGET', count, 'unfinished', waiting_field, queued_field)
  -- The application's limit as last configured (app_limits.lua); the caller's copy until then.
  local max_unfinished = tonumber(m[3] or ARGV[a + 7])
  if tonumber(c[1] or '0') >= max_unfinished then return {'APPLICATION_FULL'} end
  if tonumber(c[2] or '0') >= tonumber(ARGV[a + 8]) then return {'QUEUE_FULL'} end
  if tonumber(c[3] or '0') >= tonumber(ARGV[a + 9]) then return {'QUEUE_FULL'} end

  -- 6. The subject's own bucket first, so one person cannot spend the command's shared bucket
  --    (nor be told to wait for others): refilled like it, and only read here.
  local srate, sburst = tonumber(ARGV[a + 14]), tonumber(ARGV[a + 15])
  local stokens
  if srate > 0 then
    local sb = redis.call('HMGET', sbucket, 'tokens', 'ts')
    stokens = bucket_tokens(sb[1], sb[2], srate, sburst, now)
    if stokens < 1 then
      return {'RATE_LIMITED', math.ceil((1 - stokens) * 1000 / srate)}
    end
  end

  -- 6b. The command's intake token bucket, refilled continuously from Redis time.
  local rate, burst = tonumber(ARGV[a + 10]), tonumber(ARGV[a + 11])
  local b = redis.call('HMGET', bucket, 'tokens', 'ts')
  local tokens = bucket_tokens(b[1], b[2], rate, burst, now)
  if tokens < 1 then
    return {'RATE_LIMITED', math.ceil((1 - tokens) * 1000 / rate)}
  end

  -- 7. Intake in-flight: live reservations of this command.
  if redis.call('ZCARD', resv) >= tonumber(ARGV[a + 12]) then
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
  redis.call('ZADD', resv, now + tonumber(ARGV[a + 13]), id .. ' ' .. field)
  redis.call('HINCRBY', count, 'unfinished', 1)
  redis.call('HINCRBY', count, waiting_field, 1)
  redis.call('HINCRBY', count, queued_field, 1)
  redis.call('HSET', rk, field, id .. ' ' .. digest .. ' p')
  return {'RESERVED', redis.call('INCR', seq), now, generation}
end

for i = 1, entries do
  answers[i] = decide(3 + KEYS_PER_ENTRY * (i - 1), ARGS_PER_ENTRY * (i - 1))
end
return answers
