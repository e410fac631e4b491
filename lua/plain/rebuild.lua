-- rebuild.lua: the writes of a rebuild between its fence and its open (ready.lua), each made
-- only while that rebuild's fence is the one in place, in the Redis process that fenced it.
--
-- Why: a rebuild can be abandoned half-way and its writes still arrive. Its caller gave up
-- waiting (the future was dropped while fred still had its commands queued), it lost its
-- PostgreSQL lock (a connection cut), or its process stalled. Meanwhile a newer rebuild fenced
-- the projection, cleared it and wrote its own snapshot. A late `clear` of the old one would
-- delete the newer one's permits (another command starts beside one still at its backend); its
-- late rows would bring back an older snapshot (a command started since would wait in its
-- queue again). The token check makes every such write change nothing.
--
-- KEYS[1] meta; ARGV[1] the rebuild's token (ready.lua fence)  ARGV[2] the step:
--   clear:  KEYS[2..] keys of the application to delete (never meta)
--   rows:   per command, 17 values from ARGV[3] on and its keys from KEYS[2] on (see `row`
--           below): its status hash, its queue entry (waiting) or its permits (held by an
--           attempt), its request key
--   finish: KEYS[2] seq  KEYS[3] count; ARGV[3] the next queue sequence, then field, value
--           pairs of the counters
-- Every key it touches is one of its KEYS.
-- Returns "OK", or "FENCED" (another rebuild's fence is in place, the projection was opened,
-- or this is another Redis process): nothing was written, and this rebuild must stop.

local meta, token, step = KEYS[1], ARGV[1], ARGV[2]
local m = redis.call('HMGET', meta, 'rebuild', 'rebuild_run_id')
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if m[1] ~= token or m[2] ~= run_id then return 'FENCED' end

if step == 'clear' then
  for i = 2, #KEYS do
    if KEYS[i] ~= meta then redis.call('UNLINK', KEYS[i]) end
  end
  return 'OK'
end

if step == 'finish' then
  redis.call('SET', KEYS[2], ARGV[3])
  for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
  return 'OK'
end

-- One command, values from ARGV[a] on:
--   a id  +1 place ("queue", "hold" or "")  +2 queue_seq  +3 queue suffix  +4 "<ns>:<cmd>"
--   +5 status  +6 ns  +7 cmd  +8 accepted_at  +9 deadline_at  +10 updated_at
--   +11 lim ("" or JSON)  +12 permit expiry (ms)  +13 held (JSON list of lease keys, "" unless
--   held)  +14 attempt ("" if none)  +15 its request key's field  +16 content sha256 (hex):
--   the request key's value is "<id> <sha> c", as accept.lua writes.
-- and keys from KEYS[k] on: k status hash  +1 queue  +2 its command's resources (rq)
--   +3 ready (commands with waiting work)  +4 request-key map  +5.. the lease zsets `held`
--   lists, in its order (none unless held).
local PER_ROW, ROW_KEYS = 17, 5
-- Rust builds both (ProjectedRow::push): values that do not come in whole commands, or keys
-- that are not exactly each command's own, mean the two disagree on the layout, and nothing
-- must be written from misaligned values. Checked for every command before the first write.
if (#ARGV - 2) % PER_ROW ~= 0 then
  return redis.error_reply('rebuild.lua rows: ' .. PER_ROW .. ' values per command')
end
-- first[a]: where the keys of the command whose values start at ARGV[a] start in KEYS.
local first, held = {}, {}
local k = 2
for a = 3, #ARGV, PER_ROW do
  local leases = ARGV[a + 1] == 'hold' and cjson.decode(ARGV[a + 13]) or {}
  for i, lease in ipairs(leases) do
    if KEYS[k + ROW_KEYS + i - 1] ~= lease then
      return redis.error_reply('rebuild.lua rows: the keys do not follow the commands')
    end
  end
  first[a], held[a] = k, leases
  k = k + ROW_KEYS + #leases
end
if k ~= #KEYS + 1 then
  return redis.error_reply('rebuild.lua rows: the keys do not follow the commands')
end
for a = 3, #ARGV, PER_ROW do
  local id, place, k = ARGV[a], ARGV[a + 1], first[a]
  local cmdkey, queue, rq, ready, requests = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3],
    KEYS[k + 4]
  if place == 'queue' then
    -- In its queue at its original place, its queue in its command's ready set and its command
    -- in the application's at turn 0: before anything a later admission rotates.
    redis.call('ZADD', queue, ARGV[a + 2], id)
    redis.call('ZADD', rq, 'NX', 0, ARGV[a + 3])
    redis.call('ZADD', ready, 'NX', 0, ARGV[a + 4])
  elseif place == 'hold' then
    -- Work in hand keeps its permits until its lease (or, running, its deadline) runs out,
    -- under the attempt that holds it, which goes on renewing them.
    for i = 1, #held[a] do
      redis.call('ZADD', KEYS[k + ROW_KEYS + i - 1], ARGV[a + 12], id)
    end
    redis.call('HSET', cmdkey, 'held', ARGV[a + 13])
    if ARGV[a + 14] ~= '' then redis.call('HSET', cmdkey, 'attempt', ARGV[a + 14]) end
  end
  redis.call('HSET', cmdkey, 'status', ARGV[a + 5], 'seq', ARGV[a + 2], 'q', queue,
    'ns', ARGV[a + 6], 'cmd', ARGV[a + 7], 'accepted_at', ARGV[a + 8],
    'deadline_at', ARGV[a + 9], 'updated_at', ARGV[a + 10])
  if ARGV[a + 11] ~= '' then redis.call('HSET', cmdkey, 'lim', ARGV[a + 11]) end
  redis.call('HSET', requests, ARGV[a + 15], id .. ' ' .. ARGV[a + 16] .. ' c')
end
return 'OK'
