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
-- KEYS[10] the application's executing permits  KEYS[11] its start bucket
-- KEYS[12 ..] the keys the caller expects this call to touch (see "Declared keys" below)
-- ARGV: 1 min_generation  2 max_heads  3 scan_limit  4 lease_ms  5 lookahead
--       6 .. 5 + max_heads: one attempt token per command this call may start
--
-- Returns {"NOT_READY"} or {"OK", generation, now_ms, n, id, suffix, seq, attempt (n times),
-- asked, done, <done keys>, <next keys>}: the generation is the epoch of the admission (the claim
-- in PostgreSQL is fenced on it), now_ms the Redis time of the admission (the claim records it
-- as the commands' `started_at`: the instant their turn came, on the clock their tickets'
-- positions were observed on), the attempt the token the claim records and every later step of
-- that attempt is fenced on. `asked` counts the keys it stopped at (0: it did all it could),
-- `done` the keys no call needs again (the status hashes of the commands it started or found
-- gone), and the next keys are those it touched or asked for, with those the next call will
-- likely need (the end of this script says which): what the caller passes next time.
--
-- Declared keys. Which queues, status hashes and limit keys an admission touches depends on what
-- it reads (the turn order, each queue's first entries, each head's limit keys), so a caller
-- cannot derive them all, yet a proxy or a store that routes or locks by KEYS refuses a script
-- that touches any other. So the caller passes what the last call of this application named
-- (durable/redis/src/admission_keys.rs), and this script checks every key against KEYS
-- before it reads or writes it, and asks for those it lacks (lib/asked_keys.lua). A command of
-- the window it lacks stops it before it writes anything (the window decides each command's
-- share of the visits), asking for every such key at once. A queue, status hash or limit key it
-- lacks only stops that resource: it starts nothing of it in this call (so no command is
-- started before a head it could not look at), leaves it where it is in the turn order, asks
-- for the entry and the ones after it the visit would read next (`ask_from`), and goes on with
-- the other resources. The caller calls again at once with what was asked for.
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
-- commands that share none of its keys go, so a saturated provider account never blocks another
-- account's work. A command held back keeps all of its keys, the free ones too, from the commands
-- behind it: two commands of a resource that share a limit key start in their order.
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

-- The keys of this call beyond the application's own: those the next call should be given (in
-- the order first met), those asked for (lib/asked_keys.lua), those no call needs again.
local next_keys, next_set, missing, done = {}, {}, {}, {}
local function want(key)
  if next_set[key] == nil then next_keys[#next_keys + 1] = key end
  next_set[key] = true
end
-- Whether `key` may be touched; when not, it is asked for.
local function need(key)
  want(key)
  if declared(key) then return true end
  ask_for(key, missing)
  return false
end
local UNKNOWN = {}

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

-- Per-command state for this call: limits, live permit count, start tokens. False: no `cfg`
-- entry; UNKNOWN: its permits or bucket are not in KEYS (asked for).
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
  local known = need(lease)
  known = need(bucket) and known
  if not known then
    commands[nscmd] = UNKNOWN
    return UNKNOWN
  end
  st = {max = f[1], rate = f[2], burst = f[3], per_resource = f[4], lease = lease,
        bucket = bucket, held = live(lease), tokens = tokens_now(bucket, f[2], f[3]), took = false}
  commands[nscmd] = st
  return st
end

local function has_room(st)
  return st.held < st.max and st.tokens >= 1
end

-- Whether a limit key's state leaves no room now (its permits all held, or its bucket empty).
local function limit_full(st)
  return (st.max > 0 and st.held >= st.max) or (st.rate > 0 and st.tokens < 1)
end

-- Per limit key state for this call. A template no longer declared limits nothing (false);
-- UNKNOWN: its permits or bucket are not in KEYS (asked for).
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
  local known = true
  if st.max > 0 then known = need(st.lease) end
  if st.rate > 0 then known = need(st.bucket) and known end
  if not known then
    limits[id] = UNKNOWN
    return UNKNOWN
  end
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

-- The limit states a waiting command needs, nil when one of its keys has no room now or is
-- promised to a command ahead of it (`promised`, see `visit`), or UNKNOWN when one of them is
-- not in KEYS (every such key of the command is asked for). The second value lists the leases
-- of its keys that limit something.
local function free_limits(ns, lim, promised)
  local states = {}
  if not lim or lim == '' then return states, states end
  local seen, full, unknown = {}, false, false
  for _, pair in ipairs(cjson.decode(lim)) do
    local st = limit_state(ns, pair[1], pair[2])
    if st == UNKNOWN then
      unknown = true
    elseif st and not seen[st.lease] then
      seen[st.lease] = true
      if limit_full(st) or promised[st.lease] then full = true end
      states[#states + 1] = st
    end
  end
  if unknown then return UNKNOWN, states end
  if full then return nil, states end
  return states, states
end

-- The application's shared budgets (all namespaces): executing permits and starts per second,
-- stored by app_limits.lua (a rebuild, the configure call, every executor's catalog refresh).
-- A projection that has none yet (built before they existed) limits at the command level only.
local app = {max = tonumber(m[1] or '1e15'), rate = tonumber(m[2] or '1e15'),
             lease = KEYS[10], bucket = KEYS[11], took = false}
app.burst = app.rate
app.held = live(app.lease)
app.tokens = tokens_now(app.bucket, app.rate, app.burst)
local function app_room()
  return app.held < app.max and app.tokens >= 1
end

local taken = 0
local heads = {}
-- The answer: verdict, heads, what was asked, and the keys for the next call.
local function answer()
  local out = {'OK', generation, now, taken}
  for _, v in ipairs(heads) do out[#out + 1] = v end
  out[#out + 1] = #missing
  out[#out + 1] = #done
  for _, key in ipairs(done) do out[#out + 1] = key end
  for _, key in ipairs(next_keys) do
    if next_set[key] then out[#out + 1] = key end
  end
  return out
end
-- `key` (a started or gone command's status hash, an emptied queue) is needed by no later call.
local function finished_with(key)
  done[#done + 1] = key
  next_set[key] = false
end

if not app_room() then return answer() end

local last_turn = tonumber(redis.call('GET', turn) or '0')
local function to_back(set, member)
  last_turn = last_turn + 1
  redis.call('ZADD', set, last_turn, member)
end

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
  finished_with(cmdkey)
  heads[#heads + 1] = id
  heads[#heads + 1] = suffix
  heads[#heads + 1] = seq
  heads[#heads + 1] = attempt
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

-- Status hashes asked for from a head a visit lacked: it and the few after it that the visit
-- reads next if the head is held back by its limit keys.
local ASK_AHEAD = 4

-- Asks for the status hashes of `entries` (ZRANGE … WITHSCORES) from the one at `i`: a few
-- from the head, and all the rest once the visit looks past a head (held back by its limit
-- keys, it will look at all of them until one can start).
local function ask_from(entries, i)
  local last = #entries
  if i == 1 then last = math.min(last, 2 * ASK_AHEAD) end
  for j = i, last, 2 do need(prefix .. ':cmd:' .. entries[j]) end
end

-- One visit of a resource: starts at most one command. Returns 'taken', 'empty' (no waiting
-- work left: the resource leaves its command's ready set), 'blocked', or 'unknown' (its queue or
-- permits, an entry it had to look at, or one of the entry's limit keys is not in KEYS: asked
-- for, with the status hashes of the entries after it; nothing of the resource starts in this
-- call).
local function visit(st, ns, nscmd, suffix)
  local q = prefix .. ':q:' .. suffix
  local res_lease = prefix .. ':lease:res:' .. suffix
  local known = need(q)
  if st.per_resource > 0 then known = need(res_lease) and known end
  if not known then return 'unknown' end
  if st.per_resource > 0 and live(res_lease) >= st.per_resource then return 'blocked' end
  local entries = redis.call('ZRANGE', q, 0, lookahead - 1, 'WITHSCORES')
  if #entries == 0 then return 'empty' end
  -- The limit keys of the commands held back so far in this visit: promised to them, so no
  -- command behind takes one (it would let a head needing several keys wait while those behind
  -- it take each key as it frees). Within a resource a command therefore starts before an
  -- earlier waiting one only when the two share no limit key.
  local promised = {}
  for i = 1, #entries, 2 do
    local id, seq = entries[i], entries[i + 1]
    local cmdkey = prefix .. ':cmd:' .. id
    if not need(cmdkey) then
      ask_from(entries, i)
      return 'unknown'
    end
    local h = redis.call('HMGET', cmdkey, 'status', 'lim')
    if h[1] and h[1] ~= 'accepted' and h[1] ~= 'retry_wait' then
      -- Not waiting any more (it ended, or started elsewhere): out of the queue, counted out,
      -- and on the gone record (a gateway must not show it waiting from memory).
      redis.call('ZREM', q, id)
      gone_add(gone, id, seq)
      redis.call('HINCRBY', count, 'waiting:' .. ns, -1)
      redis.call('HINCRBY', count, 'queued:' .. nscmd, -1)
      finished_with(cmdkey)
    else
      local keyed, needs = free_limits(ns, h[2], promised)
      if keyed == UNKNOWN then
        ask_from(entries, i + 2)
        return 'unknown'
      end
      if keyed then
        start(st, keyed, ns, nscmd, suffix, q, res_lease, cmdkey, id, seq)
        return 'taken'
      end
      for _, ls in ipairs(needs) do promised[ls.lease] = true end
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

-- 1. Commands in turn order; one that can start nothing now costs this one check. Every
--    command of the window must be known before any starts: the window decides the shares.
local window = redis.call('ZRANGE', ready, 0, scan_limit - 1)
local plans = {}
for _, nscmd in ipairs(window) do
  local rq = prefix .. ':rq:' .. nscmd
  local st = command_state(nscmd)
  if need(rq) and st ~= UNKNOWN and st and has_room(st) then
    plans[#plans + 1] = {nscmd = nscmd, st = st, ns = string.sub(nscmd, 1, 36), rq = rq,
                         emptied = {}, looked = {}, served = {}}
  end
end
if #missing > 0 then return answer() end

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
      local outcome = visit(plan.st, plan.ns, plan.nscmd, suffix)
      -- A resource it could not look at keeps its turn and is not visited again this call.
      if outcome ~= 'unknown' then plan.looked[#plan.looked + 1] = suffix end
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
        finished_with(prefix .. ':q:' .. suffix)
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
  if st and st ~= UNKNOWN and st.took then persist(st) end
end
for _, st in pairs(limits) do
  if st and st ~= UNKNOWN and st.took then persist(st) end
end
if app.took and m[2] then persist(app) end

-- The next calls' keys, further on than this call went, so that a call seldom lacks one, and
-- sized by what this call did, so that a call is not given thousands of keys it will not use:
-- - the commands now at the front of `ready` name their permits, bucket and resources;
-- - the next resources in each command's turn order, twice as many as it visited (and a few
--   more, up to two calls' worth), name their queues and permits, and those of them whose
--   queue this call may read name their first entries' status hashes (the queue was named by
--   the call before);
-- - among those, a queue that started something here names the status hashes of twice as
--   many entries as it started, and a few more (a queue keeps its pace from call to call), and
--   one whose head waits on a limit key this call found full names the first `lookahead` (its
--   visit will look past the head).
for _, nscmd in ipairs(redis.call('ZRANGE', ready, 0, scan_limit - 1)) do
  if commands[nscmd] ~= false then
    want(prefix .. ':lease:cmd:' .. nscmd)
    want(prefix .. ':bucket:start:' .. nscmd)
  end
  want(prefix .. ':rq:' .. nscmd)
end
-- Whether the head of queue `q` waits on a limit key this call found full (read only if its
-- status hash is in KEYS; a limit key this call did not look at counts as free).
local function held_back(ns, q)
  local head = redis.call('ZRANGE', q, 0, 0)[1]
  if not head or not declared(prefix .. ':cmd:' .. head) then return false end
  local lim = redis.call('HGET', prefix .. ':cmd:' .. head, 'lim')
  if not lim or lim == '' then return false end
  for _, pair in ipairs(cjson.decode(lim)) do
    local st = limits[ns .. ':' .. pair[2]]
    if st and st ~= UNKNOWN and limit_full(st) then return true end
  end
  return false
end
for _, plan in ipairs(plans) do
  local ahead = math.min(2 * budget, 2 * #plan.looked + ASK_AHEAD)
  for _, suffix in ipairs(redis.call('ZRANGE', plan.rq, 0, ahead - 1)) do
    local q = prefix .. ':q:' .. suffix
    want(q)
    if plan.st.per_resource > 0 then want(prefix .. ':lease:res:' .. suffix) end
    if declared(q) then
      local s = started_in[suffix]
      local depth = s and 2 * s.count + ASK_AHEAD or 2
      if not s and held_back(plan.ns, q) then depth = lookahead end
      for _, id in ipairs(redis.call('ZRANGE', q, 0, depth - 1)) do
        want(prefix .. ':cmd:' .. id)
      end
    end
  end
end
return answer()
