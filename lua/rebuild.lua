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
-- KEYS[1] meta
-- ARGV[1] the rebuild's token (ready.lua fence)  ARGV[2] the step:
--   clear:  ARGV[3..] keys of the application to delete (never meta)
--   rows:   per command, 22 values from ARGV[3] on (see `row` below): its status hash, its
--           queue entry (waiting) or its permits (held by an attempt), its request key
--   finish: KEYS[2] seq  KEYS[3] count; ARGV[3] the next queue sequence, then field, value
--           pairs of the counters
-- Returns "OK", or "FENCED" (another rebuild's fence is in place, the projection was opened,
-- or this is another Redis process): nothing was written, and this rebuild must stop.

local meta, token, step = KEYS[1], ARGV[1], ARGV[2]
local m = redis.call('HMGET', meta, 'rebuild', 'rebuild_run_id')
local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if m[1] ~= token or m[2] ~= run_id then return 'FENCED' end

if step == 'clear' then
  for i = 3, #ARGV do
    if ARGV[i] ~= meta then redis.call('UNLINK', ARGV[i]) end
  end
  return 'OK'
end

if step == 'finish' then
  redis.call('SET', KEYS[2], ARGV[3])
  for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
  return 'OK'
end

-- One command, from ARGV[a] on:
--   a id  +1 place ("queue", "hold" or "")  +2 status hash  +3 queue  +4 queue_seq
--   +5 its command's resources (rq)  +6 queue suffix  +7 ready (commands with waiting work)
--   +8 "<ns>:<cmd>"  +9 status  +10 ns  +11 cmd  +12 accepted_at  +13 deadline_at
--   +14 updated_at  +15 lim ("" or JSON)  +16 permit expiry (ms)  +17 held (JSON list of
--   lease keys, "" unless held)  +18 attempt ("" if none)  +19 request-key map  +20 its field
--   +21 content sha256 (hex): the request key's value is "<id> <sha> c", as accept.lua writes.
local PER_ROW = 22
-- Rust builds the values (ProjectedRow::push_args): a count that does not divide evenly means
-- the two disagree on the layout, and nothing must be written from misaligned values.
if (#ARGV - 2) % PER_ROW ~= 0 then
  return redis.error_reply('rebuild.lua rows: ' .. PER_ROW .. ' values per command')
end
for a = 3, #ARGV, PER_ROW do
  local id, place, cmdkey = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if place == 'queue' then
    -- In its queue at its original place, its queue in its command's ready set and its command
    -- in the application's at turn 0: before anything a later admission rotates.
    redis.call('ZADD', ARGV[a + 3], ARGV[a + 4], id)
    redis.call('ZADD', ARGV[a + 5], 'NX', 0, ARGV[a + 6])
    redis.call('ZADD', ARGV[a + 7], 'NX', 0, ARGV[a + 8])
  elseif place == 'hold' then
    -- Work in hand keeps its permits until its lease (or, running, its deadline) runs out,
    -- under the attempt that holds it, which goes on renewing them.
    for _, lease in ipairs(cjson.decode(ARGV[a + 17])) do
      redis.call('ZADD', lease, ARGV[a + 16], id)
    end
    redis.call('HSET', cmdkey, 'held', ARGV[a + 17])
    if ARGV[a + 18] ~= '' then redis.call('HSET', cmdkey, 'attempt', ARGV[a + 18]) end
  end
  redis.call('HSET', cmdkey, 'status', ARGV[a + 9], 'seq', ARGV[a + 4], 'q', ARGV[a + 3],
    'ns', ARGV[a + 10], 'cmd', ARGV[a + 11], 'accepted_at', ARGV[a + 12],
    'deadline_at', ARGV[a + 13], 'updated_at', ARGV[a + 14])
  if ARGV[a + 15] ~= '' then redis.call('HSET', cmdkey, 'lim', ARGV[a + 15]) end
  redis.call('HSET', ARGV[a + 19], ARGV[a + 20], id .. ' ' .. ARGV[a + 21] .. ' c')
end
return 'OK'
