-- lib/epoch.lua: the prelude of every script that decides or writes for the life cycle,
-- prepended to it when the script is loaded (durable/redis/src/scripts.rs).
--
-- A projection is trusted only while (1) it is marked ready, (2) its generation is at least the
-- one the caller read from PostgreSQL, and (3) it lives in the Redis process that built it or
-- last verified it. (3) catches a Redis that lost some writes but not all: a restart from an RDB
-- or AOF taken earlier, or a replica promoted before it had every write. Such a Redis still says
-- ready at the right generation while its permits, counters and queue sequence went back.
--
-- The process is `run_id` of INFO server, which costs about 5 µs, so it is not asked on every
-- call. LASTSAVE (0.3 µs) is the start time of the process until its first save and the time of
-- its last save after that, in whole seconds; run_id is asked when
--   (a) LASTSAVE differs from the value recorded at the last verification, or
--   (b) LASTSAVE is this second or the one before (a process that just started or just saved), or
--   (c) the last verification is a second old or more.
-- Why that is enough: a restarted process loads data written before it started, so the meta it
-- loads carries a LASTSAVE and a verification time from before its start. If the recorded
-- LASTSAVE differs from the new process's, (a) catches it. If they are equal, the save (or the
-- old process's start) and the new process's start fell in the same second S: every call in S
-- and S+1 is caught by (b), and any later one by (c), since the recorded verification is older
-- than the end of S. A promoted replica has its own LASTSAVE (a) or, started in the same second
-- as its master, is caught by (c): a failover takes longer than a second. So no call trusts a
-- process that did not build or verify its projection, and run_id is asked about once a second
-- plus during the two seconds after each save.
-- On a mismatch the projection is marked not ready, and the caller's NOT_READY leads to a
-- rebuild from PostgreSQL.
--
-- (Until December 2026 there was no (b): an RDB saved in second S, the process dying and a new
-- one starting in that same S was trusted until the next re-verification. A permit held at the
-- kill but missing from the RDB was granted again (an account's max_in_flight = 1 reaching 2 in
-- the rollback test, 138 ms after the restart) and a queue sequence handed out twice.)

local function epoch_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The moment the projection was opened (its last rebuild), for bucket_tokens.
local opened_at = 0

-- The projection's generation, or nil when it must not be trusted.
local function epoch_check(meta, min_generation, now)
  local m = redis.call('HMGET', meta, 'ready', 'generation', 'run_id', 'lastsave', 'checked_at',
    'opened_at')
  local generation = tonumber(m[2] or '')
  if m[1] ~= '1' or generation == nil or generation < min_generation then return nil end
  opened_at = tonumber(m[6] or '') or 0
  local saved_s = redis.call('LASTSAVE')
  local lastsave = tostring(saved_s)
  if lastsave ~= m[4] or now - saved_s * 1000 < 2000
      or now - (tonumber(m[5] or '') or 0) >= 1000 then
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

-- The gone record `{a:ID}:gone` (zset): commands that left their queue while waiting, without
-- starting (cancelled or expired while waiting, or ended before they were ever queued). A
-- gateway answering waiting polls from memory (gateway/src/polls/waiting_view.rs) reads it
-- incrementally with waiting.lua, so such a command stops being shown as waiting within one
-- refresh. Member "<id> <seq>" (`seq`: the command's queue sequence, or an upper bound of it),
-- score: the entry's number, 1, 2, 3, ... without gaps (the highest kept + 1), so a reader
-- whose cursor is below the lowest kept number minus one knows it missed entries. Only the
-- newest GONE_KEEP entries are kept.
local GONE_KEEP = 4096
local function gone_add(gone, id, seq)
  local last = redis.call('ZRANGE', gone, -1, -1, 'WITHSCORES')
  redis.call('ZADD', gone, (tonumber(last[2]) or 0) + 1, id .. ' ' .. seq)
  redis.call('ZREMRANGEBYRANK', gone, 0, -(GONE_KEEP + 1))
end
-------------------------------------------------------------------------------------------------
-- Declared permits. A command's permits are the lease zsets named in its status hash's `held`
-- field, so a script that releases, extends or reads them would touch keys its caller never
-- declared: a proxy or a store that routes or locks by KEYS would refuse it. Instead the caller
-- passes the permits it expects after the script's own keys (it derives them from the command's
-- row: its application, command, resource and limit keys), and the script checks every `held`
-- list it reads against KEYS before it touches a lease or writes anything, asking for the rest
-- (lib/asked_keys.lua, prepended before this prelude). Extra keys cost nothing.
-- Adds to `missing` every lease of the `held` JSON list (false or nil: none) not in KEYS.
local function undeclared_held(held, missing)
  if not held then return missing end
  for _, lease in ipairs(cjson.decode(held)) do ask_for(lease, missing) end
  return missing
end
