-- admit.lua: start up to N waiting commands whose permits are all free, fairly (transition
-- `admit`).
--
-- KEYS[1] meta (ready, generation, app:max_concurrency, app:rate_per_second)
-- KEYS[2] ready (zset of commands "<ns>:<cmd>" with waiting work, score = round-robin turn)
-- KEYS[3] cfg (hash: "<ns>:<cmd>" -> "max_in_flight per_second burst per_resource";
--              "lim:<ns>:<template>" -> "max_in_flight per_second burst", 0 = unlimited)
-- KEYS[4] count  KEYS[5] turn (the last round-robin turn handed out)
-- KEYS[6] starts (hash: queue suffix -> "<decayed> <at_ms> <born_ms> <cap>", each resource
--         queue's start rate behind ticket ETAs; see durable/redis/src/start_rate.rs)
-- KEYS[7] started (hash: queue suffix -> the highest sequence started from the queue, for
--         gateways answering waiting polls from memory; see "Waiting polls" in lua/README.md)
-- KEYS[8] seq (the application's queue sequence)  KEYS[9] gone (lib/epoch.lua)
-- ARGV: 1 min_generation  2 max_heads  3 scan_limit  4 lease_ms  5 lookahead
--       6 .. 5 + max_heads: one attempt token per command this call may start
--
-- Returns {"NOT_READY"} or {"OK", generation, now_ms, id, suffix, seq, attempt, id, suffix, seq,
-- ...}: the generation is the epoch of the admission (the claim in PostgreSQL is fenced on it),
-- now_ms the Redis time of the admission (the claim records it as the commands' `started_at`:
-- the instant their turn came, on the clock their tickets' positions were observed on), the
-- attempt the token the claim records and every later step of that attempt is fenced on.
--
-- Fairness, by construction. Two round-robin levels: commands of every namespace in `ready`,
-- and each command's resources with waiting work in `{a:ID}:rq:<ns>:<cmd>`. Everything looked
-- at goes to the back of its level, whether it started something or was blocked (the blocked
-- ahead of the served, the most recently served last), so the next call starts where this one
-- stopped. A command that can start nothing now (no `cfg` entry, its
-- `max_in_flight` reached, no start token) costs one check and its resources are not visited:
-- no backlog of a saturated command, however large, stands in front of another command or
-- namespace. Within a command, blocked resources (per-resource limit, limit keys) rotate like
-- the others, so every resource is reached within a bounded number of calls.
--
-- Work bound of one call, whatever the backlog: at most `scan_limit` commands checked, at most
-- `scan_limit` resource visits shared evenly by the commands that can start work, each reading
-- at most `lookahead` queue entries (and their limit keys), and at most `max_heads` starts.
--
-- Within a resource the head goes first; a head held back only by its own limit keys (field
-- `lim` of its status hash, `[[template, key], ...]`) lets the next of the first `lookahead`
-- commands with other keys go, so a saturated provider account never blocks another account's
-- work. Commands with the same keys keep their order.
--
-- The application's budgets come first: when its executing permits (`max_concurrency`, every
-- namespace together) or its starts per second are used up, nothing starts at all.
--
-- Permits are leases: zset members scored by expiry, so a crashed executor's permits lapse by
-- themselves: only live members (expiry > now) are counted. Taking a command: every permit
-- (application, command, resource, each limit key) and every start token (application,
-- command, each rate-limited key), or none; out of its queue; status executing, its attempt
-- token in field `attempt` and the lease keys it holds in field `held`, so whoever ends it
-- releases exactly those. Only waiting commands start: an entry whose status hash says
-- anything else (it ended or started meanwhile) leaves its queue and is counted out of it.

local meta, ready, cfg, count, turn = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local starts, started, gone = KEYS[6], KEYS[7], KEYS[9]
local now = epoch_now()
local generation = epoch_check(meta, tonumber(ARGV[1]), now)
if not generation then
  return {'NOT_READY'}
end
local max_heads, scan_limit, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local lookahead = tonumber(ARGV[5])
local prefix = string.sub(meta, 1, #meta - 5)  -- "{a:ID}" from "{a:ID}:meta"
local m = redis.call('HMGET', meta, 'app:max_concurrency', 'app:rate_per_second')

local function numbers(spec)
  local f = {}
  for w in string.gmatch(spec, '%S+') do f[#f + 1] = tonumber(w) end
  return f
end

-- Tokens of a bucket refilled up to now (Redis time; lib/epoch.lua).
local function tokens_now(bucket, rate, burst)
  local b = redis.call('HMGET', bucket, 'tokens', 'ts')
  return bucket_tokens(b[1], b[2], rate, burst, now)
end

local function live(lease)
  return redis.call('ZCOUNT', lease, '(' .. now, '+inf')
end

-- Per-command state for this call: limits, live permit count, start tokens.
local commands = {}
local function command_state(nscmd)
  local st = commands[nscmd]
  if st ~= nil then return st end
  local spec = redis.call('HGET', cfg, nscmd)
  if not spec then
    commands[nscmd] = false
    return false
  end
  local f = numbers(spec)
  local lease = prefix .. ':lease:cmd:' .. nscmd
  local bucket = prefix .. ':bucket:start:' .. nscmd
  st = {max = f[1], rate = f[2], burst = f[3], per_resource = f[4], lease = lease,
        bucket = bucket, held = live(lease), tokens = tokens_now(bucket, f[2], f[3]), took = false}
  commands[nscmd] = st
  return st
end

local function has_room(st)
  return st.held < st.max and st.tokens >= 1
end

-- Per limit key state for this call. A template no longer declared limits nothing.
local limits = {}
local function limit_state(ns, template, key)
  local id = ns .. ':' .. key
  local st = limits[id]
  if st ~= nil then return st end
  local spec = redis.call('HGET', cfg, 'lim:' .. ns .. ':' .. template)
  if not spec then
    limits[id] = false
    return false
  end
  local f = numbers(spec)
  st = {max = f[1], rate = f[2], burst = f[3], lease = prefix .. ':lease:lim:' .. id,
        bucket = prefix .. ':bucket:lim:' .. id, took = false, held = 0, tokens = 0}
  if st.max > 0 then
    -- Members lapsed for an hour belong to commands whose status hash is gone (nothing else
    -- could release them); every other lapsed member is also in its command's lease zset,
    -- where the sweeper reconciles it. They are not counted either way.
    redis.call('ZREMRANGEBYSCORE', st.lease, '-inf', now - 3600000)
    st.held = live(st.lease)
  end
  if st.rate > 0 then st.tokens = tokens_now(st.bucket, st.rate, st.burst) end
  limits[id] = st
  return st
end

-- The limit states a waiting command needs, or nil when one of its keys has no room now.
local function free_limits(ns, lim)
  local states = {}
  if not lim or lim == '' then return states end
  local seen = {}
  for _, pair in ipairs(cjson.decode(lim)) do
    local st = limit_state(ns, pair[1], pair[2])
    if st and not seen[st.lease] then
      seen[st.lease] = true
      if (st.max > 0 and st.held >= st.max) or (st.rate > 0 and st.tokens < 1) then
        return nil
      end
      states[#states + 1] = st
    end
  end
  return states
end

-- The application's shared budgets (all namespaces): executing permits and starts per second,
-- stored by app_limits.lua (a rebuild, the configure call, every executor's catalog refresh).
-- A projection that has none yet (built before they existed) limits at the command level only.
local app = {max = tonumber(m[1] or '1e15'), rate = tonumber(m[2] or '1e15'),
             lease = prefix .. ':lease:app', bucket = prefix .. ':bucket:app', took = false}
app.burst = app.rate
app.held = live(app.lease)
app.tokens = tokens_now(app.bucket, app.rate, app.burst)
local function app_room()
  return app.held < app.max and app.tokens >= 1
end

local answer = {'OK', generation, now}
if not app_room() then return answer end

local last_turn = tonumber(redis.call('GET', turn) or '0')
local function to_back(set, member)
  last_turn = last_turn + 1
  redis.call('ZADD', set, last_turn, member)
end

local taken = 0
-- Starts of this call per resource, in the order the resources first started something:
-- {suffix, count, cap} (the command's declared per_second).
local started_in, started_order = {}, {}

-- Starts `id` (sequence `seq`) of resource `suffix` with every permit and token it needs.
local function start(st, keyed, ns, nscmd, suffix, q, res_lease, cmdkey, id, seq)
  local attempt = ARGV[6 + taken]
  local expiry = now + lease_ms
  local held = {app.lease, st.lease}
  redis.call('ZADD', app.lease, expiry, id)
  app.held = app.held + 1
  app.tokens = app.tokens - 1
  app.took = true
  redis.call('ZADD', st.lease, expiry, id)
  if st.per_resource > 0 then
    redis.call('ZADD', res_lease, expiry, id)
    held[#held + 1] = res_lease
  end
  for _, ls in ipairs(keyed) do
    if ls.max > 0 then
      redis.call('ZADD', ls.lease, expiry, id)
      ls.held = ls.held + 1
      held[#held + 1] = ls.lease
    end
    if ls.rate > 0 then
      ls.tokens = ls.tokens - 1
      ls.took = true
    end
  end
  st.held = st.held + 1
  st.tokens = st.tokens - 1
  st.took = true
  redis.call('ZREM', q, id)
  redis.call('HINCRBY', count, 'waiting:' .. ns, -1)
  redis.call('HINCRBY', count, 'queued:' .. nscmd, -1)
  redis.call('HSET', cmdkey, 'status', 'executing', 'updated_at', now, 'held', cjson.encode(held),
    'attempt', attempt)
  answer[#answer + 1] = id
  answer[#answer + 1] = suffix
  answer[#answer + 1] = seq
  answer[#answer + 1] = attempt
  taken = taken + 1
  local s = started_in[suffix]
  if not s then
    s = {suffix = suffix, count = 0, max_seq = 0}
    started_in[suffix] = s
    started_order[#started_order + 1] = s
  end
  s.count = s.count + 1
  s.max_seq = math.max(s.max_seq, tonumber(seq))
  s.cap = st.rate
end

-- One visit of a resource: starts at most one command. Returns 'taken', 'empty' (no waiting
-- work left: the resource leaves its command's ready set) or 'blocked'.
local function visit(st, ns, nscmd, suffix)
  local q = prefix .. ':q:' .. suffix
  local res_lease = prefix .. ':lease:res:' .. suffix
  if st.per_resource > 0 and live(res_lease) >= st.per_resource then return 'blocked' end
  local entries = redis.call('ZRANGE', q, 0, lookahead - 1, 'WITHSCORES')
  if #entries == 0 then return 'empty' end
  for i = 1, #entries, 2 do
    local id, seq = entries[i], entries[i + 1]
    local cmdkey = prefix .. ':cmd:' .. id
    local h = redis.call('HMGET', cmdkey, 'status', 'lim')
    if h[1] and h[1] ~= 'accepted' and h[1] ~= 'retry_wait' then
      -- Not waiting any more (it ended, or started elsewhere): out of the queue, counted out,
      -- and on the gone record (a gateway must not show it waiting from memory).
      redis.call('ZREM', q, id)
      gone_add(gone, id, seq)
      redis.call('HINCRBY', count, 'waiting:' .. ns, -1)
      redis.call('HINCRBY', count, 'queued:' .. nscmd, -1)
    else
      local keyed = free_limits(ns, h[2])
      if keyed then
        start(st, keyed, ns, nscmd, suffix, q, res_lease, cmdkey, id, seq)
        return 'taken'
      end
    end
  end
  if redis.call('EXISTS', q) == 0 then return 'empty' end
  return 'blocked'
end

-- Moves `members` to the back of `set`: those looked at that started nothing first (in the
-- order they were looked at), then those that started something, least recently last.
local function rotate(set, members, served)
  local later = {}
  for _, member in ipairs(members) do
    if served[member] then later[#later + 1] = member else to_back(set, member) end
  end
  table.sort(later, function(a, b) return served[a] < served[b] end)
  for _, member in ipairs(later) do to_back(set, member) end
end

-- 1. Commands in turn order; one that can start nothing now costs this one check.
local window = redis.call('ZRANGE', ready, 0, scan_limit - 1)
local plans = {}
for _, nscmd in ipairs(window) do
  local st = command_state(nscmd)
  if st and has_room(st) then
    plans[#plans + 1] = {nscmd = nscmd, st = st, ns = string.sub(nscmd, 1, 36),
                         rq = prefix .. ':rq:' .. nscmd, emptied = {}, looked = {}, served = {}}
  end
end

-- 2. The resource visits of this call, shared evenly by the commands that can start work. A
--    pass visits every command, and each of its resources once; passes repeat while they
--    start something, so commands and resources take turns within a call too.
local budget = math.max(1, math.floor(scan_limit / math.max(1, #plans)))
for _, plan in ipairs(plans) do
  plan.resources = redis.call('ZRANGE', plan.rq, 0, budget - 1)
  plan.active = plan.resources
end
local step = 0
local command_served = {}
local progress = true
while progress and taken < max_heads and app_room() do
  progress = false
  for _, plan in ipairs(plans) do
    if taken >= max_heads or not app_room() then break end
    local still = {}
    for _, suffix in ipairs(plan.active) do
      if taken >= max_heads or not app_room() or not has_room(plan.st) then break end
      plan.looked[#plan.looked + 1] = suffix
      local outcome = visit(plan.st, plan.ns, plan.nscmd, suffix)
      if outcome == 'taken' then
        step = step + 1
        plan.served[suffix] = step
        command_served[plan.nscmd] = step
        still[#still + 1] = suffix
        progress = true
      elseif outcome == 'empty' then
        plan.emptied[suffix] = true
      end
    end
    plan.active = still
  end
end

-- 3. Everything looked at goes to the back of its level, so the next call starts further on;
--    a resource with no waiting work leaves its command's set, a command with none leaves
--    `ready`.
for _, plan in ipairs(plans) do
  local seen, looked = {}, {}
  for _, suffix in ipairs(plan.looked) do
    if not seen[suffix] then
      seen[suffix] = true
      if plan.emptied[suffix] then
        redis.call('ZREM', plan.rq, suffix)
      else
        looked[#looked + 1] = suffix
      end
    end
  end
  rotate(plan.rq, looked, plan.served)
end
local kept = {}
for _, nscmd in ipairs(window) do
  if redis.call('EXISTS', prefix .. ':rq:' .. nscmd) == 0 then
    redis.call('ZREM', ready, nscmd)
  else
    kept[#kept + 1] = nscmd
  end
end
rotate(ready, kept, command_served)
redis.call('SET', turn, last_turn)

-- The start rate of each resource queue that started something (ticket ETAs read it): its
-- starts since its first admission (`born`), decayed with τ = 10 s (`STARTS_TAU_MS`, the same
-- constant as durable/redis/src/start_rate.rs, which turns the record into a rate). A queue
-- left empty forgets its record; whoever waits there next starts a new one.
local STARTS_TAU_MS = 10000
for _, s in ipairs(started_order) do
  local record = redis.call('HGET', starts, s.suffix)
  local value
  if record then
    local f = numbers(record)
    local decayed = f[1] * math.exp(-math.max(0, now - f[2]) / STARTS_TAU_MS) + s.count
    value = string.format('%.4f %d %d %d', decayed, now, f[3], s.cap)
  else
    value = string.format('%d %d %d %d', s.count, now, now, s.cap)
  end
  redis.call('HSET', starts, s.suffix, value)
end
-- The highest sequence started from each queue: a waiting command above it cannot have
-- started. A queue's first value is the application's sequence now (every sequence handed out
-- so far, so also every command that started from it before it last emptied, or that a requeue
-- put back since), so the record never understates; later starts only raise it. Dropped with
-- the start record when the queue empties.
local app_seq
for _, s in ipairs(started_order) do
  local high = tonumber(redis.call('HGET', started, s.suffix))
  if not high then
    app_seq = app_seq or tonumber(redis.call('GET', KEYS[8]) or '0')
    high = app_seq
  end
  redis.call('HSET', started, s.suffix, string.format('%d', math.max(high, s.max_seq)))
end
for _, plan in ipairs(plans) do
  for _, suffix in ipairs(plan.looked) do
    if plan.emptied[suffix] then
      redis.call('HDEL', starts, suffix)
      redis.call('HDEL', started, suffix)
    end
  end
end

-- Persist the start buckets that gave tokens.
local function persist(st)
  redis.call('HSET', st.bucket, 'tokens', tostring(st.tokens), 'ts', now)
  redis.call('PEXPIRE', st.bucket, math.ceil((st.burst - st.tokens) * 1000 / st.rate) + 1000)
end
for _, st in pairs(commands) do
  if st and st.took then persist(st) end
end
for _, st in pairs(limits) do
  if st and st.took then persist(st) end
end
if app.took and m[2] then persist(app) end
return answer
