-- status.lua: what the status board reads from one application's projection, in one call.
--
-- KEYS[1] meta  KEYS[2] application leases  KEYS[3] the namespace's ring of outcomes (land.lua)
-- ARGV: 1 namespace id  2 how many ready resources to look at, at most  3 how many busiest to
--       return  4 how many whole seconds of outcomes  5 how many command codes follow (n)
--       6 .. 5+n command codes  then limit keys (rendered, of this namespace)
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
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = '(' .. now_ms

local m = redis.call('HMGET', meta, 'generation', 'ready')

local commands = {}
for i = 1, ncmd do
  commands[i] = redis.call('ZCOUNT', prefix .. ':lease:cmd:' .. ns .. ':' .. ARGV[5 + i], live, '+inf')
end
local limit_keys = {}
for i = 6 + ncmd, #ARGV do
  limit_keys[#limit_keys + 1] = redis.call('ZCOUNT', prefix .. ':lease:lim:' .. ns .. ':' .. ARGV[i], live, '+inf')
end

-- Busiest resources of this namespace among the first `scan` ready ones. Only the `top`
-- deepest are kept, by insertion into a short list (no sort of every queue seen): the script
-- blocks Redis, so its cost is one ZCARD per queue looked at and little else.
local members = {}
for i = 1, ncmd do
  if #members >= scan then break end
  local page = redis.call('ZRANGE', prefix .. ':rq:' .. ns .. ':' .. ARGV[5 + i], 0, scan - #members - 1)
  for _, suffix in ipairs(page) do members[#members + 1] = suffix end
end
local call = redis.call
local queue_prefix = prefix .. ':q:'
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
  busiest[#busiest + 1] = call('ZCOUNT', prefix .. ':lease:res:' .. suffix, live, '+inf')
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
