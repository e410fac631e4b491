-- finish.lua: mirror a command's terminal state that PostgreSQL has just committed, and release
-- its permits.
--
-- KEYS[1] count  KEYS[2] cmd (status hash)  KEYS[3] admission lease zset of its command
-- KEYS[4] per-resource lease zset of its queue  KEYS[5] drain counter of this second
-- ARGV: 1 id  2 status  3 updated_at  4 result (JSON text or "")  5 error_code  6 error_message
--       7 retention_ms
--
-- ARGV[2] may also be `needs_review`: the outcome is unknown, the permits go back, but the
-- command keeps its share of `unfinished` until an authoritative result (or an operator) ends it.
--
-- Exactly-once counting without trusting the lease: `unfinished` drops only on the transition of
-- the status hash from a non-terminal status to a terminal one. A missing hash means the command
-- was not counted (a rebuild after its commit did not project it), so nothing is taken back.
-- Permits are zset members, so releasing twice (or after expiry) changes nothing.
-- The same transition counts the outcome in `<prefix>:outcomes:<ns>:<unix second>` (a hash by
-- status), which the status board reads.
-- Returns 1 when this call counted the command out.

local count, cmdkey, lease, res_lease, drain = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]
local terminal = {succeeded = true, rejected = true, failed = true, expired = true, cancelled = true}
local current = redis.call('HGET', cmdkey, 'status')
local counted = 0
if current and not terminal[current] and terminal[ARGV[2]] then
  redis.call('HINCRBY', count, 'unfinished', -1)
  redis.call('INCR', drain)
  redis.call('EXPIRE', drain, 30)
  -- Outcomes per namespace and second, for the status board (kept two minutes).
  local ns = redis.call('HGET', cmdkey, 'ns')
  if ns then
    local outcomes = string.match(count, '^(.*):count$') .. ':outcomes:' .. ns .. ':' .. redis.call('TIME')[1]
    redis.call('HINCRBY', outcomes, ARGV[2], 1)
    redis.call('EXPIRE', outcomes, 120)
  end
  counted = 1
end
redis.call('ZREM', lease, id)
redis.call('ZREM', res_lease, id)
-- Every permit it holds, as admit.lua (or a rebuild) recorded them in `held`.
local held = redis.call('HGET', cmdkey, 'held')
if held then
  for _, lease in ipairs(cjson.decode(held)) do redis.call('ZREM', lease, id) end
  redis.call('HDEL', cmdkey, 'held')
end
-- A final status is final: a late mirror (a needs_review decided before the result landed)
-- never reopens it, so the command is never counted out twice.
if current and not terminal[current] then
  redis.call('HSET', cmdkey, 'status', ARGV[2], 'updated_at', ARGV[3])
  if ARGV[4] ~= '' then redis.call('HSET', cmdkey, 'result', ARGV[4]) end
  if ARGV[5] ~= '' then redis.call('HSET', cmdkey, 'error_code', ARGV[5], 'error_message', ARGV[6]) end
  -- A needs_review command is not over: its status stays readable until it is.
  if terminal[ARGV[2]] then redis.call('PEXPIRE', cmdkey, tonumber(ARGV[7])) end
end
return counted
