-- lib/epoch.lua: the prelude of every script that decides or writes for the life cycle,
-- prepended to it when the script is loaded (durable/src/projection/scripts.rs).
--
-- A projection is trusted only while (1) it is marked ready, (2) its generation is at least the
-- one the caller read from PostgreSQL, and (3) it lives in the Redis process that built it or
-- last verified it. (3) catches a Redis that lost some writes but not all: a restart from an RDB
-- or AOF taken earlier, or a replica promoted before it had every write. Such a Redis still says
-- ready at the right generation while its permits, counters and queue sequence went back.
--
-- The process is `run_id` of INFO server, which costs about 5 µs, so it is not asked on every
-- call: LASTSAVE (0.3 µs) is compared with the value recorded at the last verification, and
-- run_id is asked when they differ or the verification is a second old. LASTSAVE is the start
-- time of the process until its first save and the time of its last save after that, so a
-- restart shows: the data it loads was written before the process died, and so carries a
-- LASTSAVE recorded in an earlier second than the new process's start. A promoted replica that
-- started in the same second as its master is caught by the one-second re-verification, since
-- a failover takes longer than that. (The one case left: a Redis that lives less than a
-- second, verifies a projection and restarts within that second.)
-- On a mismatch the projection is marked not ready, and the caller's NOT_READY leads to a
-- rebuild from PostgreSQL.
--
-- `strict` asks run_id on every call: admit.lua, which grants the concurrency permits. The
-- LASTSAVE shortcut has a hole one second wide: an RDB saved in second T, the process dying
-- and a new one starting in that same second T (its LASTSAVE, its start time, equals the saved
-- one) is trusted until the next re-verification, and a permit held at the kill but missing
-- from the RDB would be granted again (seen as an account's max_in_flight = 1 reaching 2 in the
-- rollback test, 138 ms after the restart). A permit exceeded is the one limit that must never
-- be; the 5 µs per admission (a batch of heads) is the price.

local function epoch_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The moment the projection was opened (its last rebuild), for bucket_tokens.
local opened_at = 0

-- The projection's generation, or nil when it must not be trusted.
local function epoch_check(meta, min_generation, now, strict)
  local m = redis.call('HMGET', meta, 'ready', 'generation', 'run_id', 'lastsave', 'checked_at',
    'opened_at')
  local generation = tonumber(m[2] or '')
  if m[1] ~= '1' or generation == nil or generation < min_generation then return nil end
  opened_at = tonumber(m[6] or '') or 0
  local lastsave = tostring(redis.call('LASTSAVE'))
  if strict or lastsave ~= m[4] or now - (tonumber(m[5] or '') or 0) >= 1000 then
    local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
    if run_id ~= m[3] then
      redis.call('HSET', meta, 'ready', '0', 'lost_at', now)
      return nil
    end
    redis.call('HSET', meta, 'lastsave', lastsave, 'checked_at', now)
  end
  return generation
end

-- The tokens of a token bucket (its `tokens` and `ts` fields as read) refilled up to `now`. A
-- bucket that does not exist was lost with the projection (or never used): it counts as empty
-- when the rebuild that opened the projection fenced it (`opened_at`, see ready.lua), so a
-- rebuild never hands out a burst that was already spent before the loss; one opened long ago
-- is full.
local function bucket_tokens(tokens, ts, rate, burst, now)
  tokens, ts = tonumber(tokens), tonumber(ts)
  if tokens == nil or ts == nil then tokens, ts = 0, opened_at end
  if now > ts then tokens = math.min(burst, tokens + (now - ts) * rate / 1000) end
  return tokens
end

-- Statuses a command never leaves.
local TERMINAL = {succeeded = true, rejected = true, failed = true, expired = true, cancelled = true}

-- Releases every permit a command holds (the lease zsets admit.lua or a rebuild recorded in its
-- status hash) and forgets its attempt. ZREM, so releasing twice changes nothing.
local function release_held(cmdkey, id)
  local held = redis.call('HGET', cmdkey, 'held')
  if held then
    for _, lease in ipairs(cjson.decode(held)) do redis.call('ZREM', lease, id) end
  end
  redis.call('HDEL', cmdkey, 'held', 'attempt')
end

-------------------------------------------------------------------------------------------------
