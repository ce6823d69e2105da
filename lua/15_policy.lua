-- Queue policy and flow control (SPEC §10; the design is docs/flow-control.md).
-- The policy is the HASH k.policy, read once per call; absent fields have their
-- defaults, and a queue without the key behaves as if no policy existed. The
-- functions of the other files call in through the `flow` table.

-- Every policy field, by its API name (nested ones dotted), with its range.
-- Durations are seconds; they may be given with an s, m, h or d suffix.
local POLICY_FIELDS = {
  ['max_retries']           = { kind = 'int', min = 1, max = 10 },
  ['backoff.base_seconds']  = { kind = 'int', min = 1, max = 3600 },
  ['backoff.max_seconds']   = { kind = 'int', min = 1, max = 86400 },
  ['backoff.jitter']        = { kind = 'enum', values = { none = true, full = true, equal = true } },
  ['lease_seconds']         = { kind = 'int', min = 1, max = 43200 },
  ['dead_ttl']              = { kind = 'duration', min = 0, max = 3650 * 86400 },
  ['succeeded_ttl']         = { kind = 'duration', min = 0, max = 3650 * 86400 },
  ['max_in_flight']         = { kind = 'int', min = 0, max = 1000000 },
  ['rate_limit.per_second'] = { kind = 'number', min = 0.001, max = 100000 },
  ['rate_limit.burst']      = { kind = 'int', min = 1, max = 100000 },
}
local DURATION_UNITS = { s = 1, m = 60, h = 3600, d = 86400 }

-- The call's policy as a table field -> string, read once per call (k is
-- built afresh by every call).
local function read_policy(k)
  local p = k.flow_policy
  if p then return p end
  p = {}
  local raw = redis.call('HGETALL', k.policy)
  for i = 1, #raw, 2 do p[raw[i]] = raw[i + 1] end
  k.flow_policy = p
  return p
end

-- The canonical string of a field's value, or nil and why it is wrong.
local function check_field(name, value)
  local f = POLICY_FIELDS[name]
  if f == nil then return nil, 'unknown field' end
  if f.kind == 'enum' then
    if f.values[value] then return value end
    return nil, 'must be none, full or equal'
  end
  local n
  if f.kind == 'duration' then
    local digits, unit = string.match(value, '^(%d+)([smhd]?)$')
    n = digits and tonumber(digits) * (DURATION_UNITS[unit] or 1)
  elseif f.kind == 'number' then
    n = tonumber(value)
    if n and (n ~= n or n == math.huge or n == -math.huge) then n = nil end
  else
    n = to_int(value)
  end
  if n == nil or n < f.min or n > f.max then
    return nil, string.format('must be %s between %s and %s',
                              f.kind == 'number' and 'a number' or 'an integer', f.min, f.max)
  end
  if f.kind == 'number' then return string.format('%.17g', n) end
  return string.format('%d', n)
end

-- The tokens of the rate limit's bucket at now (refilled since `at`, at most
-- burst), or nil when the queue has no rate limit. The bucket is the STRING
-- "<tokens> <at ms>"; an absent bucket is full. Read once per call.
local function bucket_level(k, p, now)
  local rate, burst = tonumber(p['rate_limit.per_second']), tonumber(p['rate_limit.burst'])
  if rate == nil or burst == nil then return nil end
  local b = redis.call('GET', k.bucket)
  local tokens, at
  if b then
    local t, a = string.match(b, '^(%S+) (%d+)$')
    tokens, at = tonumber(t), tonumber(a)
  end
  if tokens == nil or at == nil then return burst, rate, burst end
  return math.min(burst, tokens + math.max(0, now - at) * rate / 1000), rate, burst
end

-- Stores the bucket at now, in one command; it expires when it would be full
-- again (so an idle queue keeps no bucket).
local function bucket_store(k, tokens, rate, burst, now)
  local refill_ms = math.ceil((burst - tokens) * 1000 / rate)
  if refill_ms <= 0 then
    redis.call('DEL', k.bucket)
    return
  end
  redis.call('SET', k.bucket, string.format('%.17g %d', tokens, now), 'PX', refill_ms)
end

-- The backoff of the n-th failure in ms: min(base x 2^n, max) seconds, then
-- the jitter, drawn here (Redis 7 replicates effects, not the call) from a
-- generator seeded with Redis's clock and the message id.
function flow.backoff_ms(k, id, retries)
  local p = read_policy(k)
  local base = tonumber(p['backoff.base_seconds']) or 1
  local max = tonumber(p['backoff.max_seconds']) or MAX_BACKOFF_S
  local delay = math.min(base * 2 ^ retries, max) * 1000
  local jitter = p['backoff.jitter']
  if jitter ~= 'full' and jitter ~= 'equal' then return delay end
  local t = redis.call('TIME')
  math.randomseed(((tonumber(t[1]) % 2000) * 1000000 + tonumber(t[2]) +
                   (tonumber(id) or 0) * 7919) % 2147483647)
  if jitter == 'full' then return math.random(0, delay) end
  local half = math.floor(delay / 2)
  return half + math.random(0, delay - half)
end

-- A message left processing: with a cap, waiters may lease again. Publishes
-- the wake once per call.
function flow.freed(k)
  if k.flow_woke then return end
  local cap = tonumber(read_policy(k).max_in_flight)
  if cap and cap > 0 then
    notify(k)
    k.flow_woke = true
  end
end

-- The retention tick applies: the policy's, else the daemon's (ms).
function flow.retention(k, dead_ttl_ms, succeeded_ttl_ms)
  local p = read_policy(k)
  local dead, succeeded = tonumber(p.dead_ttl), tonumber(p.succeeded_ttl)
  return dead and dead * 1000 or dead_ttl_ms, succeeded and succeeded * 1000 or succeeded_ttl_ms
end

-- The retention a timer hint is computed for. A policy that sets either
-- retention makes it the shortest one set (an early tick only finds nothing
-- due and promises the right time); without, the caller's.
function flow.hint_ttl(k, ttl_ms)
  local p = read_policy(k)
  if p.dead_ttl == nil and p.succeeded_ttl == nil then return ttl_ms end
  local best = -1
  for _, f in ipairs({ 'dead_ttl', 'succeeded_ttl' }) do
    local v = tonumber(p[f])
    if v and v > 0 and (best < 0 or v * 1000 < best) then best = v * 1000 end
  end
  if ttl_ms and ttl_ms > 0 and (best < 0 or ttl_ms < best) then best = ttl_ms end
  return best
end

-- The lease of a claim or extend: from_flag means the caller's value is its
-- daemon's default, which the policy's lease_seconds overrides.
function flow.lease_ms(k, lease_ms, from_flag)
  if not from_flag then return lease_ms end
  local s = tonumber(read_policy(k).lease_seconds)
  return s and s * 1000 or lease_ms
end

-- The retries of an enqueue that gave none: the policy's, else the caller's.
function flow.max_retries(k, max_retries, defaulted)
  if not defaulted then return max_retries end
  return tonumber(read_policy(k).max_retries) or max_retries
end

-- How many of `count` a claim may lease now (pause, then cap, then rate). A
-- claim held back while something is claimable counts in held_<reason>.
-- Sets k.flow_retry_ms: when the rate limit held it back, the ms until the
-- next token is due; else 0 (the waiters wait for a wake-up).
function flow.admit(k, now, count)
  k.flow_retry_ms = 0
  local p = read_policy(k)
  if p.paused == nil and p.max_in_flight == nil and p['rate_limit.per_second'] == nil then
    return count
  end
  local allowed, reason = count, nil
  if p.paused == '1' then
    allowed, reason = 0, 'paused'
  else
    local cap = tonumber(p.max_in_flight) or 0
    if cap > 0 then
      local room = math.max(0, cap - redis.call('ZCARD', k.processing))
      if room < allowed then allowed, reason = room, 'cap' end
    end
    local tokens, rate = nil, nil
    if allowed > 0 then tokens, rate = bucket_level(k, p, now) end
    k.flow_tokens = tokens
    if tokens and tokens < allowed then
      allowed, reason = math.floor(tokens), 'rate'
      if allowed == 0 then k.flow_retry_ms = math.max(1, math.ceil((1 - tokens) * 1000 / rate)) end
    end
  end
  if reason and redis.call('LLEN', k.due) + redis.call('LLEN', k.ready) > allowed then
    redis.call('HINCRBY', k.stats, 'held_' .. reason, 1)
  end
  return allowed
end

-- A claim leased `got` messages: each takes a token (from the level admit
-- read in this call).
function flow.spent(k, now, got)
  local tokens = k.flow_tokens
  if got == 0 or tokens == nil then return end
  local p = read_policy(k)
  bucket_store(k, math.max(0, tokens - got), tonumber(p['rate_limit.per_second']),
               tonumber(p['rate_limit.burst']), now)
end

-- policy_get: the queue's policy as stored.
--   KEYS[1]  <prefix>:{q}                       queue key base
-- Returns a flat array field, value of the fields set (see POLICY_FIELDS;
-- `paused` 1 while paused): absent ones have their defaults.
local function policy_get(keys, args)
  return redis.call('HGETALL', queue_keys(keys[1]).policy)
end

-- policy_set: replace or change the queue's policy.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   ARGV[1]  mode                               "replace": the fields given are
--                                               the whole policy (others back to
--                                               their defaults); "merge": change
--                                               only those given
--   ARGV[2..] field, value, ...                 API names (POLICY_FIELDS); value
--                                               "" sets the field back to its default
-- A rate limit needs both per_second and burst. The pause is kept. The rate
-- limit's bucket keeps the tokens it had (at most the new burst); a removed
-- rate deletes it. Publishes the wake (a looser limit may let waiters lease).
-- Returns {"ok", field, value, ...} (the policy now, as policy_get) or
-- {"invalid", field, why}: nothing changed.
local function policy_set(keys, args)
  local k = queue_keys(keys[1])
  local mode = args[1]
  if mode ~= 'replace' and mode ~= 'merge' then return bad_arg('mode') end
  if #args % 2 ~= 1 then return bad_arg('pairs') end
  local old = read_policy(k)
  local new = {}
  if mode == 'merge' then
    for f, v in pairs(old) do new[f] = v end
  else
    new.paused = old.paused
  end
  for i = 2, #args, 2 do
    local name, value = args[i], args[i + 1]
    if value == '' then
      if POLICY_FIELDS[name] == nil then return { 'invalid', name, 'unknown field' } end
      new[name] = nil
    else
      local v, why = check_field(name, value)
      if v == nil then return { 'invalid', name, why } end
      new[name] = v
    end
  end
  if (new['rate_limit.per_second'] == nil) ~= (new['rate_limit.burst'] == nil) then
    return { 'invalid', 'rate_limit', 'needs both per_second and burst' }
  end
  local now = now_ms()
  local tokens, rate, burst = bucket_level(k, old, now)
  local flat = {}
  for f, v in pairs(new) do
    flat[#flat + 1] = f
    flat[#flat + 1] = v
  end
  redis.call('DEL', k.policy)
  if #flat > 0 then redis.call('HSET', k.policy, unpack(flat)) end
  k.flow_policy = nil
  local _, new_rate, new_burst = bucket_level(k, read_policy(k), now)
  if new_rate == nil then
    redis.call('DEL', k.bucket)
  elseif tokens then
    bucket_store(k, math.min(tokens, new_burst), new_rate, new_burst, now)
  end
  notify(k)
  local out = { 'ok' }
  for i = 1, #flat do out[#out + 1] = flat[i] end
  return out
end

-- pause: pause ("1") or resume ("0") the queue's claims.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   ARGV[1]  "1" | "0"
-- A resume publishes the wake. Returns 1 when the queue is now paused, else 0.
local function pause(keys, args)
  local k = queue_keys(keys[1])
  if args[1] == '1' then
    redis.call('HSET', k.policy, 'paused', '1')
    return 1
  end
  if args[1] ~= '0' then return bad_arg('paused') end
  redis.call('HDEL', k.policy, 'paused')
  notify(k)
  return 0
end

register('policy_get', policy_get, { 'no-writes' })
register('policy_set', policy_set)
register('pause', pause)
