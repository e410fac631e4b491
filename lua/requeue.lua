-- requeue.lua: put a command back in its queue after PostgreSQL moved it back to waiting (its
-- executor's lease expired, or it was admitted but could not be claimed and is still waiting).
--
-- KEYS[1] count  KEYS[2] q  KEYS[3] cmd (status hash)  KEYS[4] admission lease zset
-- KEYS[5] per-resource lease zset  KEYS[6] ready
-- ARGV: 1 id  2 seq  3 ns  4 cmd  5 suffix (queue suffix for the ready set)  6 status  7 updated_at
--
-- ZADD NX makes the waiting counts exactly-once; its original sequence keeps its place in line.
-- Returns 1 if this call put it back.

local count, q, cmdkey, lease, res_lease, ready = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id = ARGV[1]
redis.call('ZREM', lease, id)
redis.call('ZREM', res_lease, id)
-- Every permit it holds, as admit.lua (or a rebuild) recorded them in `held`.
local held = redis.call('HGET', cmdkey, 'held')
if held then
  for _, lease in ipairs(cjson.decode(held)) do redis.call('ZREM', lease, id) end
  redis.call('HDEL', cmdkey, 'held')
end
local added = redis.call('ZADD', q, 'NX', ARGV[2], id)
if added == 1 then
  redis.call('HINCRBY', count, 'waiting:' .. ARGV[3], 1)
  redis.call('HINCRBY', count, 'queued:' .. ARGV[3] .. ':' .. ARGV[4], 1)
  redis.call('ZADD', ready, 'NX', 0, ARGV[5])
end
redis.call('HSET', cmdkey, 'status', ARGV[6], 'updated_at', ARGV[7])
return added
