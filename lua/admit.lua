-- admit.lua: pick up to N queued commands whose permits are all free, and take those permits.
--
-- KEYS[1] meta (ready, generation, app:max_concurrency, app:rate_per_second)  KEYS[2] ready (zset of queue suffixes "<ns>:<cmd>:<resource>", score = turn)
-- KEYS[3] cfg (hash: "<ns>:<cmd>" -> "max_in_flight per_second burst per_resource";
--              "lim:<ns>:<template>" -> "max_in_flight per_second burst", 0 = unlimited)
-- KEYS[4] count  KEYS[5] turn (string counter for round-robin turns)
-- ARGV: 1 min_generation  2 max_heads  3 scan_limit  4 lease_ms  5 lookahead
--
-- Resources are visited least recently served first, one command per resource per pass, so one
-- busy resource cannot starve the others; a resource whose command has no free permit (or no
-- start token) is skipped, never waited on. Within a resource the head goes first; a head held
-- back only by its own limit keys (field `lim` of its status hash, `[[template, key], ...]`)
-- lets the next of the first `lookahead` commands with other keys go, so a saturated provider
-- account never blocks another account's work. Commands with the same keys keep their order.
--
-- The application's budgets come first: when its executing permits (`max_concurrency`, every
-- namespace together) or its starts per second are used up, nothing starts at all.
--
-- Permits are leases: zset members scored by expiry, so a crashed executor's permits lapse by
-- themselves: only live members (expiry > now) are counted. Lapsed members stay until the
-- executors' sweeper has put their commands back in line. Taking a command: every permit
-- (application, command, resource, each limit key) and every start token (application, command,
-- each rate-limited key), or none; out of its queue; status executing; the lease keys it holds
-- in field `held`, so whoever ends it releases exactly those.
--
-- Returns {"NOT_READY"} or {"OK", id, suffix, seq, id, suffix, seq, ...}.

local meta, ready, cfg, count, turn = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local m = redis.call('HMGET', meta, 'ready', 'generation', 'app:max_concurrency',
  'app:rate_per_second')
if m[1] ~= '1' or tonumber(m[2] or '-1') < tonumber(ARGV[1]) then
  return {'NOT_READY'}
end
local max_heads, scan_limit, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local lookahead = tonumber(ARGV[5])
local prefix = string.sub(meta, 1, #meta - 5)  -- "{a:ID}" from "{a:ID}:meta"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function numbers(spec)
  local f = {}
  for w in string.gmatch(spec, '%S+') do f[#f + 1] = tonumber(w) end
  return f
end

-- Tokens of a bucket refilled up to now (Redis time).
local function tokens_now(bucket, rate, burst)
  local b = redis.call('HMGET', bucket, 'tokens', 'ts')
  local tokens, ts = tonumber(b[1]), tonumber(b[2])
  if tokens == nil or ts == nil then tokens, ts = burst, now end
  if now > ts then tokens = math.min(burst, tokens + (now - ts) * rate / 1000) end
  return tokens
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

-- The limit states a queued command needs, or nil when one of its keys has no room now.
local function free_limits(ns, cmdkey)
  local states = {}
  local lim = redis.call('HGET', cmdkey, 'lim')
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
local app = {max = tonumber(m[3] or '1e15'), rate = tonumber(m[4] or '1e15'),
             lease = prefix .. ':lease:app', bucket = prefix .. ':bucket:app', took = false}
app.burst = app.rate
app.held = live(app.lease)
app.tokens = tokens_now(app.bucket, app.rate, app.burst)

local candidates = redis.call('ZRANGE', ready, 0, scan_limit - 1)
local answer = {'OK'}
local taken = 0
local active = {}
for _, suffix in ipairs(candidates) do active[#active + 1] = suffix end

local function app_room()
  return app.held < app.max and app.tokens >= 1
end

while taken < max_heads and #active > 0 and app_room() do
  local still = {}
  for _, suffix in ipairs(active) do
    if taken >= max_heads or not app_room() then break end
    local ns = string.sub(suffix, 1, 36)
    local cmd_end = string.find(suffix, ':', 38, true)
    local nscmd = string.sub(suffix, 1, cmd_end - 1)
    local q = prefix .. ':q:' .. suffix
    local entries = redis.call('ZRANGE', q, 0, lookahead - 1, 'WITHSCORES')
    local st = command_state(nscmd)
    local res_lease = prefix .. ':lease:res:' .. suffix
    if #entries == 0 then
      redis.call('ZREM', ready, suffix)
    elseif st and st.held < st.max and st.tokens >= 1
        and (st.per_resource == 0 or live(res_lease) < st.per_resource) then
      for i = 1, #entries, 2 do
        local id, seq = entries[i], entries[i + 1]
        local cmdkey = prefix .. ':cmd:' .. id
        local keyed = free_limits(ns, cmdkey)
        if keyed then
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
          redis.call('HSET', cmdkey, 'status', 'executing', 'updated_at', now,
            'held', cjson.encode(held))
          answer[#answer + 1] = id
          answer[#answer + 1] = suffix
          answer[#answer + 1] = seq
          taken = taken + 1
          -- Served: to the back of the round-robin order.
          redis.call('ZADD', ready, redis.call('INCR', turn), suffix)
          still[#still + 1] = suffix
          break
        end
      end
    end
  end
  active = still
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
if app.took and m[4] then persist(app) end
return answer
