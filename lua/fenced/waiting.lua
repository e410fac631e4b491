-- waiting.lua: what a gateway needs to answer waiting polls from memory (the pull of
-- gateway/src/polls/waiting_view.rs, at most every 100 ms per application while polls arrive), in
-- one round trip and without writes. See "Waiting polls" in lua/README.md.
--
-- KEYS[1] meta  KEYS[2] seq (the application's queue sequence)  KEYS[3] started (admit.lua:
-- queue suffix -> highest sequence started)  KEYS[4] starts (admit.lua's start records)
-- KEYS[5] gone (lib/epoch.lua's record of commands that left a queue without starting)
-- KEYS[6 ..] the resource queues asked about
-- ARGV[1] gone cursor (the last entry number the caller read; 0: none)  ARGV[2] at most this
-- many gone entries  ARGV[3] runs cover at most this many of a queue's first entries
-- ARGV[4] the reads allowed per queue for its runs (see runs_of)  ARGV[5 ..] the queues'
-- suffixes, in the order of KEYS[6 ..]
--
-- Returns {ready, generation, now_ms, app_seq, gone_low, gone_high, gone, queues}:
--   gone_low/gone_high: the lowest and highest entry numbers kept (0 when none); the caller
--     missed entries when gone_low > cursor + 1 (trimmed) or when it read fewer than
--     gone_high - cursor;
--   gone: {member, number, ...} of the entries after the cursor, oldest first, at most ARGV[2];
--   queues: per queue asked, {started, waiting, head, tail, start_record, runs, more}: started
--     is false while the queue has no start on record (then nothing about it can be told from
--     memory), head and tail are the lowest and highest sequences waiting (false when empty);
--     runs are the sequences (scores) of the queue's first entries in rank order, run-length
--     encoded as {start, length, start, length, ...} (runs of consecutive sequences: a queue
--     whose sequences are contiguous is one pair). They cover the ranks 0 .. n - 1 exactly, n
--     the sum of the lengths, so a sequence found in them has as its ZRANK at now_ms the
--     lengths before its run plus its offset in it; more is 1 when the queue holds entries
--     beyond them, else 0.
-- Everything is read at one instant, so the gone entries and the queues agree.

-- Runs of at most `cap` first entries of the queue `key`, within `budget` reads (a ZRANGE
-- counts 4 plus the entries it returns: what a call costs Redis against one more entry,
-- loadtest/src/bin/bench_waiting.rs). Queue sequences are unique integers, so when rank r + k
-- holds sequence s + k, ranks r .. r + k are one run without reading them: a run is found by
-- doubling k, then halving back to its last rank. A stretch that is not one run is read whole,
-- CHUNK entries at a time. Returns the runs and how many entries they cover.
local CHUNK = 32
local function runs_of(key, cap, budget)
  local n = math.min(redis.call('ZCARD', key), cap)
  local runs, count = {}, 0
  local function at(rank)
    budget = budget - 5
    return tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2])
  end
  local function add(s, len)
    if count > 0 and runs[count - 1] + runs[count] == s then
      runs[count] = runs[count] + len
    else
      runs[count + 1], runs[count + 2], count = s, len, count + 2
    end
  end
  local r, s = 0, n > 0 and at(0)
  while r < n and budget > 0 do
    local k = math.min(CHUNK, n - 1 - r)
    local probe = k > 0 and at(r + k)
    if k == 0 then
      add(s, 1)
      r = n
    elseif probe == s + k then
      -- Ranks r .. r + lo are one run; hi, when known, is not in it and holds `after`.
      local lo, hi, after = k, nil, nil
      while not hi and lo < n - 1 - r and budget > 0 do
        local try = math.min(2 * lo, n - 1 - r)
        local v = at(r + try)
        if v == s + try then lo = try else hi, after = try, v end
      end
      while hi and hi - lo > 1 and budget > 0 do
        local mid = math.floor((lo + hi) / 2)
        local v = at(r + mid)
        if v == s + mid then lo = mid else hi, after = mid, v end
      end
      -- Unless the budget ran out first (which ends the outer loop: s is not used again), the
      -- run ends at r + lo: the queue's end, or hi = lo + 1 holds the next run's start.
      add(s, lo + 1)
      r, s = r + lo + 1, after
    else
      local z = redis.call('ZRANGE', key, r, r + k - 1, 'WITHSCORES')
      budget = budget - 4 - k
      for i = 2, #z, 2 do add(tonumber(z[i]), 1) end
      r, s = r + k, probe
    end
  end
  return runs, r
end

-- Trusted only in the Redis process that built or verified the projection (lib/epoch.lua): a
-- Redis restarted from an older snapshot still says ready at the same generation, with its
-- queues as they were then, so a rank read there is not the truth. Such a process is marked
-- not ready here as by any life-cycle script, and this answers not ready.
local trusted = epoch_check(KEYS[1], 0, epoch_now())
local m = {trusted and '1' or '0', trusted and tostring(trusted) or false}
local t = redis.call('TIME')
local app_seq = tonumber(redis.call('GET', KEYS[2]) or '0')
local low = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
local high = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT',
  0, tonumber(ARGV[2]))
local queues = {}
for i = 6, #KEYS do
  local suffix = ARGV[i - 1]
  local waiting = redis.call('ZCARD', KEYS[i])
  local head = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  local tail = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  local runs, covered = runs_of(KEYS[i], tonumber(ARGV[3]), tonumber(ARGV[4]))
  queues[#queues + 1] = {redis.call('HGET', KEYS[3], suffix) or false, waiting,
    head[2] or false, tail[2] or false, redis.call('HGET', KEYS[4], suffix) or false, runs,
    waiting > covered and 1 or 0}
end
return {m[1] or false, m[2] or false,
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), app_seq,
  tonumber(low[2]) or 0, tonumber(high[2]) or 0, gone, queues}
