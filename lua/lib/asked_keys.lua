-- lib/asked_keys.lua: the prelude of every script that learns which keys it needs by reading
-- others (a command's permits in its `held` field, a lease's holders, the commands in `count`,
-- a resource's queue), prepended to it when the script is loaded
-- (durable/redis/src/scripts.rs). Such a script touches only keys in KEYS: before it
-- touches one it read the name of, it checks it with `declared`, and when one is missing it
-- answers keys_answer(missing), {'KEYS', key, ...}, having written nothing. The caller then
-- calls again with those keys (durable/redis/src/asked_keys.rs).
local declared_set = nil
-- Whether `key` is in KEYS.
local function declared(key)
  if not declared_set then
    declared_set = {}
    for _, k in ipairs(KEYS) do declared_set[k] = true end
  end
  return declared_set[key] == true
end
local asked_set = {}
-- Adds `key` to `missing` unless it is in KEYS or already asked for; returns `missing`.
local function ask_for(key, missing)
  if not declared(key) and not asked_set[key] then
    asked_set[key] = true
    missing[#missing + 1] = key
  end
  return missing
end
-- The answer that asks for the keys in `missing`.
local function keys_answer(missing)
  table.insert(missing, 1, 'KEYS')
  return missing
end
