-- status_board.lua: what the status board reads from one application's projection, in one call.
--
-- KEYS[1] meta  KEYS[2] application leases  KEYS[3] the namespace's ring of outcomes (land.lua)
-- KEYS[4 ..] in any order: each command's lease zset and resource set (`rq`), each limit key's
--            lease zset, and the queue and resource lease zset of resources it asked for
-- ARGV: 1 namespace id  2 how many ready resources to look at, at most  3 how many busiest to
--       return  4 how many whole seconds of outcomes  5 how many command codes follow (n)
--       6 "ask" or "partial"  7 .. 6+n command codes  then limit keys (rendered, of this namespace)
--
-- Every key in KEYS. The resources with waiting work are only known once the `rq` sets are
-- read, so with ARGV[6] = "ask" a call that meets resources whose queue or lease zset it was
-- not given answers {"KEYS", key, ...} (nothing else) and the caller calls again with them and
-- "partial" (durable/redis/src/asked_keys.rs). A "partial" call looks only at the
-- resources it was given among those it meets (`scanned` counts them): the round-robin order of
-- the `rq` sets moves between the two calls, and the board is a view, not a decision.
-- Returns {generation|false, ready, resources_waiting, scanned, application_in_flight,
--          {in_flight per command code}, {suffix, waiting, in_flight, ...} busiest first,
--          {unix_second, succeeded, rejected, failed, expired, cancelled, ...} oldest first,
--          {in_flight per limit key}}
--
-- Reads only: no key is created. "In flight" counts live permits (expiry after Redis TIME).
-- Each command's set of resources with waiting work (`{a:ID}:rq:<ns>:<cmd>`) is read in turn
-- order, all commands together up to ARGV[2] members, so the cost is bounded whatever the
-- backlog; `scanned` says how many were looked at. A resource stays in its set until admit.lua
-- finds its queue empty, so `resources_waiting` and the busiest count only queues that hold
-- waiting commands (among the scanned ones). Only this namespace's commands are read.

local meta, app_leases = KEYS[1], KEYS[2]
local prefix = string.match(meta, '^(.*):meta$')
local ns = ARGV[1]
local scan, top, seconds, ncmd = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ask = ARGV[6] == 'ask'
local function given(key)
  if not declared(key) then error('status_board.lua: ' .. key .. ' is not in KEYS') end
  return key
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = '(' .. now_ms

local m = redis.call('HMGET', meta, 'generation', 'ready')

local commands = {}
for i = 1, ncmd do
  commands[i] = redis.call('ZCOUNT', given(prefix .. ':lease:cmd:' .. ns .. ':' .. ARGV[6 + i]), live, '+inf')
end
local limit_keys = {}
for i = 7 + ncmd, #ARGV do
  limit_keys[#limit_keys + 1] = redis.call('ZCOUNT', given(prefix .. ':lease:lim:' .. ns .. ':' .. ARGV[i]), live, '+inf')
end

-- Busiest resources of this namespace among the first `scan` ready ones. Only the `top`
-- deepest are kept, by insertion into a short list (no sort of every queue seen): the script
-- blocks Redis, so its cost is one ZCARD per queue looked at and little else.
local members, missing, seen = {}, {}, 0
local queue_prefix, lease_prefix = prefix .. ':q:', prefix .. ':lease:res:'
for i = 1, ncmd do
  if seen >= scan then break end
  local page = redis.call('ZRANGE', given(prefix .. ':rq:' .. ns .. ':' .. ARGV[6 + i]), 0, scan - seen - 1)
  seen = seen + #page
  for _, suffix in ipairs(page) do
    if declared(queue_prefix .. suffix) and declared(lease_prefix .. suffix) then
      members[#members + 1] = suffix
    else
      ask_for(queue_prefix .. suffix, missing)
      ask_for(lease_prefix .. suffix, missing)
    end
  end
end
if ask and #missing > 0 then return keys_answer(missing) end
local call = redis.call
local mine, deepest = 0, {}
-- Deeper first; equal depths by name, so the board does not shuffle between reads.
local function before(depth, suffix, other)
  return depth > other[2] or (depth == other[2] and suffix < other[1])
end
for i = 1, #members do
  local suffix = members[i]
  local waiting = call('ZCARD', queue_prefix .. suffix)
  if waiting > 0 then
    mine = mine + 1
    local n = #deepest
    if top > 0 and (n < top or before(waiting, suffix, deepest[n])) then
      local at = n + 1
      while at > 1 and before(waiting, suffix, deepest[at - 1]) do
        deepest[at] = deepest[at - 1]
        at = at - 1
      end
      deepest[at] = {suffix, waiting}
      if #deepest > top then deepest[#deepest] = nil end
    end
  end
end
local busiest = {}
for i = 1, #deepest do
  local suffix = deepest[i][1]
  busiest[#busiest + 1] = suffix
  busiest[#busiest + 1] = deepest[i][2]
  busiest[#busiest + 1] = call('ZCOUNT', lease_prefix .. suffix, live, '+inf')
end

-- Outcomes of the last whole seconds (the current one is still filling).
local outcomes = {}
local names = {'succeeded', 'rejected', 'failed', 'expired', 'cancelled'}
for s = tonumber(t[1]) - seconds, tonumber(t[1]) - 1 do
  -- A slot holding another second (older, or not yet reused) counts nothing for this one.
  local slot = s % 120 -- land.lua's OUTCOME_SLOTS
  local fields = {slot .. ':at'}
  for i = 1, #names do fields[i + 1] = slot .. ':' .. names[i] end
  local h = redis.call('HMGET', KEYS[3], unpack(fields))
  local here = h[1] == tostring(s)
  outcomes[#outcomes + 1] = s
  for i = 1, #names do outcomes[#outcomes + 1] = here and tonumber(h[i + 1] or '0') or 0 end
end

return {m[1] or false, m[2] or '0', mine, #members,
        redis.call('ZCOUNT', app_leases, live, '+inf'), commands, busiest, outcomes, limit_keys}
