-- strict_keys.lua (tests only; prepended when SLUICE_STRICT_SCRIPT_KEYS is set): every key the
-- script touches must be one of its KEYS, as Redis asks of scripts and as proxies and stores
-- that route or lock by the declared keys rely on. A call on any other key fails the script
-- before it reaches Redis. `redis` is shadowed by a local, so the library and the script after
-- this prelude (and their `local call = redis.call`) see the checked calls. The line before it
-- names the script: `local strict_keys_script = '<name>'`.
local redis = (function(real)
  local declared = {}
  for _, key in ipairs(KEYS) do declared[key] = true end
  -- Commands without keys, and those whose every argument is a key; the rest take one, first.
  local keyless = {TIME = true, INFO = true, LASTSAVE = true, PUBLISH = true}
  local all_keys = {DEL = true, EXISTS = true, UNLINK = true}
  local function check(command, ...)
    local name = string.upper(command)
    if keyless[name] then return end
    local args = {...}
    local last = all_keys[name] and #args or 1
    for i = 1, last do
      if not declared[args[i]] then
        error('strict keys: ' .. strict_keys_script .. ': ' .. name .. ' on ' ..
              tostring(args[i]) .. ', not in KEYS')
      end
    end
  end
  return setmetatable({
    call = function(command, ...) check(command, ...) return real.call(command, ...) end,
    pcall = function(command, ...) check(command, ...) return real.pcall(command, ...) end,
  }, {__index = real})
end)(redis)
