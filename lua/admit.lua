-- admit.lua: pick up to N queue heads whose permits are all free, and take those permits.
--
-- KEYS[1] meta  KEYS[2] ready (zset of queue suffixes "<ns>:<cmd>:<resource>", score = turn)
-- KEYS[3] cfg (hash "<ns>:<cmd>" -> "max_in_flight per_second burst per_resource")
-- KEYS[4] count  KEYS[5] turn (string counter for round-robin turns)
-- ARGV: 1 min_generation  2 max_heads  3 scan_limit  4 lease_ms
--
-- Resources are visited least recently served first, one head per resource per pass, so one
-- busy resource cannot starve the others; a resource whose command has no free permit (or no
-- start token) is skipped, never waited on. Permits are leases: zset members scored by expiry,
-- so a crashed executor's permits lapse by themselves: only live members (expiry > now) are
-- counted. Lapsed members stay until the executors' sweeper has put their commands back in line
-- (an executor may have died between admitting a head and claiming its row). Taking a head: its
-- permits, a start token, out of its queue, status executing.
--
-- Returns {"NOT_READY"} or {"OK", id, suffix, seq, id, suffix, seq, ...}.

local meta, ready, cfg, count, turn = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local m = redis.call('HMGET', meta, 'ready', 'generation')
if m[1] ~= '1' or tonumber(m[2] or '-1') < tonumber(ARGV[1]) then
  return {'NOT_READY'}
end
local max_heads, scan_limit, lease_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local prefix = string.sub(meta, 1, #meta - 5)  -- "{a:ID}" from "{a:ID}:meta"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

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
  local f = {}
  for w in string.gmatch(spec, '%S+') do f[#f + 1] = tonumber(w) end
  local lease = prefix .. ':lease:cmd:' .. nscmd
  local bucket = prefix .. ':bucket:start:' .. nscmd
  local b = redis.call('HMGET', bucket, 'tokens', 'ts')
  local tokens, ts = tonumber(b[1]), tonumber(b[2])
  if tokens == nil or ts == nil then tokens, ts = f[3], now end
  if now > ts then tokens = math.min(f[3], tokens + (now - ts) * f[2] / 1000) end
  st = {max = f[1], rate = f[2], burst = f[3], per_resource = f[4], lease = lease,
        bucket = bucket, held = redis.call('ZCOUNT', lease, '(' .. now, '+inf'),
        tokens = tokens, took = false}
  commands[nscmd] = st
  return st
end

local candidates = redis.call('ZRANGE', ready, 0, scan_limit - 1)
local answer = {'OK'}
local taken = 0
local active = {}
for _, suffix in ipairs(candidates) do active[#active + 1] = suffix end

while taken < max_heads and #active > 0 do
  local still = {}
  for _, suffix in ipairs(active) do
    if taken >= max_heads then break end
    local ns_end = 36
    local cmd_end = string.find(suffix, ':', ns_end + 2, true)
    local nscmd = string.sub(suffix, 1, cmd_end - 1)
    local q = prefix .. ':q:' .. suffix
    local head = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
    local st = command_state(nscmd)
    if #head == 0 then
      redis.call('ZREM', ready, suffix)
    elseif st and st.held < st.max and st.tokens >= 1 then
      local resource_ok = true
      local res_lease = prefix .. ':lease:res:' .. suffix
      if st.per_resource > 0 then
        resource_ok = redis.call('ZCOUNT', res_lease, '(' .. now, '+inf') < st.per_resource
      end
      if resource_ok then
        local id, seq = head[1], head[2]
        redis.call('ZADD', st.lease, now + lease_ms, id)
        if st.per_resource > 0 then redis.call('ZADD', res_lease, now + lease_ms, id) end
        st.held = st.held + 1
        st.tokens = st.tokens - 1
        st.took = true
        redis.call('ZREM', q, id)
        local ns = string.sub(suffix, 1, ns_end)
        redis.call('HINCRBY', count, 'waiting:' .. ns, -1)
        redis.call('HINCRBY', count, 'queued:' .. nscmd, -1)
        redis.call('HSET', prefix .. ':cmd:' .. id, 'status', 'executing', 'updated_at', now)
        answer[#answer + 1] = id
        answer[#answer + 1] = suffix
        answer[#answer + 1] = seq
        taken = taken + 1
        -- Served: to the back of the round-robin order.
        redis.call('ZADD', ready, redis.call('INCR', turn), suffix)
        still[#still + 1] = suffix
      end
    end
  end
  active = still
end

-- Persist the start buckets of the commands that started something.
for _, st in pairs(commands) do
  if st and st.took then
    redis.call('HSET', st.bucket, 'tokens', tostring(st.tokens), 'ts', now)
    redis.call('PEXPIRE', st.bucket, math.ceil((st.burst - st.tokens) * 1000 / st.rate) + 1000)
  end
end
return answer
