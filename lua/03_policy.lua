-- Queue policy and flow control (docs/reference.md "Queue policy and flow control"; the design is docs/flow-control.md).
-- The policy is the HASH k.policy, read once per call; absent fields have their
-- defaults, and a queue without the key behaves as if no policy existed. The
-- functions of the later files call in through the module table `flow`.

local flow = {}
do
  local register, queue_keys, now_ms = common.register, common.queue_keys, common.now_ms
  local notify, bad_arg, to_int = common.notify, common.bad_arg, common.to_int
  local int_arg = common.int_arg
  local MAX_BACKOFF_S = common.MAX_BACKOFF_S
  local priorities_used = record.priorities_used

  -- Every policy field, by its API name (nested ones dotted), with its range.
  -- Durations are seconds; they may be given with an s, m, h or d suffix.
  local POLICY_FIELDS = {
    -- max_retries: 1-1000, or "unlimited" (stored as given; a message gets -1).
    ['max_retries']           = { kind = 'int', min = 1, max = 1000, unlimited = true },
    ['backoff.base_seconds']  = { kind = 'int', min = 1, max = 3600 },
    ['backoff.max_seconds']   = { kind = 'int', min = 1, max = 86400 },
    ['backoff.jitter']        = { kind = 'enum', values = { none = true, full = true, equal = true } },
    ['lease_seconds']         = { kind = 'int', min = 1, max = 43200 },
    ['dead_ttl']              = { kind = 'duration', min = 0, max = 3650 * 86400 },
    ['succeeded_ttl']         = { kind = 'duration', min = 0, max = 3650 * 86400 },
    ['max_in_flight']         = { kind = 'int', min = 0, max = 1000000 },
    ['rate_limit.per_second'] = { kind = 'number', min = 0.001, max = 100000 },
    ['rate_limit.burst']      = { kind = 'int', min = 1, max = 100000 },
    ['alert_url']             = { kind = 'url', max = 2048 },
    -- The message lifecycle (docs/lifecycle.md, docs/reference.md "Expiry",
    -- "Dead-letter queue").
    ['message_ttl']           = { kind = 'duration', min = 0, max = 2592000 },
    ['on_expiry']             = { kind = 'enum', values = { dead = true, delete = true },
                                  why = 'must be dead or delete' },
    ['dead_letter_queue']     = { kind = 'queue', max = 255 },
    -- Fairness groups (docs/fairness.md, docs/reference.md "Fairness groups").
    ['group_max_in_flight']   = { kind = 'int', min = 0, max = 1000000 },
    ['group_rate_limit.per_second'] = { kind = 'number', min = 0.001, max = 100000 },
    ['group_rate_limit.burst'] = { kind = 'int', min = 1, max = 100000 },
    ['fifo_groups']           = { kind = 'enum', values = { ['true'] = true, ['false'] = true },
                                  why = 'must be true or false' },
    -- What a lease that runs out does (docs/reference.md "Queue policy and
    -- flow control"): "backoff" (the default) schedules the retry by the
    -- backoff table; "redeliver" makes it due at once (SQS's visibility
    -- timeout). Either way it counts as a failed attempt.
    ['lease_expiry']          = { kind = 'enum', values = { backoff = true, redeliver = true },
                                  why = 'must be backoff or redeliver' },
    -- The defaults of an enqueue and a claim that give none, and the
    -- enqueue's size limit (docs/sqs.md section 3).
    ['delay_seconds']         = { kind = 'int', min = 0, max = 900 },
    ['max_payload_bytes']     = { kind = 'int', min = 1024, max = 1048576 },
    ['wait_seconds']          = { kind = 'int', min = 0, max = 20 },
    -- Only stored and shown: the queue was made through the SQS endpoint,
    -- and its ContentBasedDeduplication.
    ['sqs']                   = { kind = 'enum', values = { ['true'] = true, ['false'] = true },
                                  why = 'must be true or false' },
    ['content_based_dedup']   = { kind = 'enum', values = { ['true'] = true, ['false'] = true },
                                  why = 'must be true or false' },
  }
  -- Written by policy_set itself (ms), never given: when the policy was
  -- first set, and last changed.
  local POLICY_STAMPS = { created_at = true, updated_at = true }
  -- Kept by every policy_set, never given to it: the pause (pause's), and
  -- `shards`, how many shards the queue spreads over (docs/sharding.md;
  -- absent: 1), which shards_set changes with the layout (06_shards.lua).
  local POLICY_KEPT = { paused = 'pause', shards = 'shards_set' }
  -- The smallest max_payload_bytes: an enqueue of a payload no longer than
  -- this never reads the policy for its size check.
  local PAYLOAD_LIMIT_MIN = 1024
  local DURATION_UNITS = { s = 1, m = 60, h = 3600, d = 86400 }

  -- The call's policy as a table field -> string, read once per call (k is
  -- built afresh by every call). Read only: a queue without a policy (the
  -- usual case) shares one empty table instead of allocating its own.
  local NO_POLICY = {}
  local function read_policy(k)
    local p = k.flow_policy
    if p then return p end
    local raw = redis.call('HGETALL', k.policy)
    if #raw == 0 then
      p = NO_POLICY
    else
      p = {}
      for i = 1, #raw, 2 do p[raw[i]] = raw[i + 1] end
    end
    k.flow_policy = p
    return p
  end

  local valid_utf8

  -- An alert_url (docs/dead-letters.md §3): an absolute http:// or https:// URL
  -- with a host, 1-2048 bytes of UTF-8 without spaces or control characters
  -- (C0, DEL, C1), as policy.c's rd_policy_alert_url_valid.
  local function valid_url(s, max)
    if #s < 1 or #s > max or not valid_utf8(s) then return false end
    if not (string.find(s, '^https?://[^/?#]')) then return false end
    if string.find(s, '[%z\1-\32\127]') or string.find(s, '\194[\128-\159]') then return false end
    return true
  end

  -- The canonical string of a field's value, or nil and why it is wrong.
  local function check_field(name, value)
    local f = POLICY_FIELDS[name]
    if f == nil then return nil, 'unknown field' end
    if f.kind == 'url' then
      if valid_url(value, f.max) then return value end
      return nil, 'must be an absolute http:// or https:// URL of 1 to 2048 bytes of UTF-8, ' ..
                  'without spaces or control characters'
    end
    if f.kind == 'enum' then
      if f.values[value] then return value end
      return nil, f.why or 'must be none, full or equal'
    end
    if f.kind == 'queue' then
      -- A queue name as the API takes one (docs/reference.md "Queue names"):
      -- 1-255 bytes of UTF-8 without control characters.
      if #value >= 1 and #value <= f.max and valid_utf8(value) and value ~= '.'
         and value ~= '..' and not string.find(value, '[%z\1-\31\127]')
         and not string.find(value, '\194[\128-\159]') then
        return value
      end
      return nil, 'must be a queue name: 1 to 255 bytes of UTF-8 without control characters, ' ..
                  'not . or ..'
    end
    if f.unlimited and value == 'unlimited' then return value end
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
      return nil, string.format('must be %s between %s and %s%s',
                                f.kind == 'number' and 'a number' or 'an integer', f.min, f.max,
                                f.unlimited and ' or unlimited' or '')
    end
    if f.kind == 'number' then return string.format('%.17g', n) end
    return string.format('%d', n)
  end

  -- The tokens at now of the token bucket at key (refilled since `at`, at
  -- most burst). The bucket is the STRING "<tokens> <at ms>"; an absent
  -- bucket is full.
  local function bucket_read(key, rate, burst, now)
    local b = redis.call('GET', key)
    local tokens, at
    if b then
      local t, a = string.match(b, '^(%S+) (%d+)$')
      tokens, at = tonumber(t), tonumber(a)
    end
    if tokens == nil or at == nil then return burst end
    return math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
  end

  -- Stores the bucket at key at now, in one command; it expires when it
  -- would be full again (so an idle queue or group keeps no bucket).
  local function bucket_write(key, tokens, rate, burst, now)
    local refill_ms = math.ceil((burst - tokens) * 1000 / rate)
    if refill_ms <= 0 then
      redis.call('DEL', key)
      return
    end
    redis.call('SET', key, string.format('%.17g %d', tokens, now), 'PX', refill_ms)
  end

  -- The tokens of the queue's rate limit at now, its rate and burst, or nil
  -- when the queue has none. Read once per call.
  local function bucket_level(k, p, now)
    local rate, burst = tonumber(p['rate_limit.per_second']), tonumber(p['rate_limit.burst'])
    if rate == nil or burst == nil then return nil end
    return bucket_read(k.bucket, rate, burst, now), rate, burst
  end

  local function bucket_store(k, tokens, rate, burst, now)
    bucket_write(k.bucket, tokens, rate, burst, now)
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

  -- Dead-letter rules (docs/reference.md "Recovery rules", docs/dead-letters.md §2): the policy field
  -- dead_letter_rules holds the list as a JSON array, canonical (validated by
  -- check_rules). Each rule: error_contains and/or error_prefix (1-255 bytes,
  -- both must hold when both are given), action "retry" (delay_seconds 0-86400,
  -- default 0; max_times 1-100, default 1) or "dead".
  local RULES_MAX = 20
  local RULE_TEXT_MAX = 255
  -- Rules look at the error's first this many bytes only (README "Recovery
  -- rules"): a plain substring search costs up to error bytes x needle bytes,
  -- so 20 rules of 255 bytes over a 1 MiB error held Redis 300 ms; over 4 KiB,
  -- well under 1 ms. The error itself is kept whole.
  local RULE_MATCH_BYTES = 4096
  local RULE_KEYS = { error_contains = true, error_prefix = true, action = true,
                      delay_seconds = true, max_times = true }

  function valid_utf8(s)
    if not string.find(s, '[\128-\255]') then return true end  -- ASCII: the usual case
    local i, n = 1, #s
    while i <= n do
      local c = string.byte(s, i)
      local len
      if c < 0x80 then len = 1
      elseif c >= 0xC2 and c <= 0xDF then len = 2
      elseif c >= 0xE0 and c <= 0xEF then len = 3
      elseif c >= 0xF0 and c <= 0xF4 then len = 4
      else return false end
      if i + len - 1 > n then return false end
      for j = i + 1, i + len - 1 do
        local b = string.byte(s, j)
        if b < 0x80 or b > 0xBF then return false end
      end
      if len == 3 then
        local b = string.byte(s, i + 1)
        if (c == 0xE0 and b < 0xA0) or (c == 0xED and b > 0x9F) then return false end
      elseif len == 4 then
        local b = string.byte(s, i + 1)
        if (c == 0xF0 and b < 0x90) or (c == 0xF4 and b > 0x8F) then return false end
      end
      i = i + len
    end
    return true
  end

  -- The canonical JSON of a rule list, or nil, the field at fault
  -- ("dead_letter_rules[2].max_times", 0-based as the API names it) and why.
  -- An empty list is "" (the field's default: no rules).
  local function check_rules(value)
    local ok, list = pcall(cjson.decode, value)
    local field = 'dead_letter_rules'
    if not ok or type(list) ~= 'table' then return nil, field, 'must be a JSON array of rules' end
    local n = 0
    for key in pairs(list) do
      if type(key) ~= 'number' then return nil, field, 'must be a JSON array of rules' end
      n = n + 1
    end
    if n ~= #list then return nil, field, 'must be a JSON array of rules' end
    if n > RULES_MAX then return nil, field, 'at most 20 rules' end
    if n == 0 then return '' end
    local out = {}
    for i = 1, n do
      local r, at = list[i], string.format('%s[%d].', field, i - 1)
      if type(r) ~= 'table' then
        return nil, string.format('%s[%d]', field, i - 1), 'must be an object'
      end
      for key in pairs(r) do
        if not RULE_KEYS[key] then
          return nil, string.format('%s[%d]', field, i - 1),
                 'a rule has only error_contains, error_prefix, action, delay_seconds and max_times'
        end
      end
      local c = {}
      for _, name in ipairs({ 'error_contains', 'error_prefix' }) do
        local t = r[name]
        if t ~= nil and t ~= cjson.null then
          if type(t) ~= 'string' or #t < 1 or #t > RULE_TEXT_MAX or not valid_utf8(t) then
            return nil, at .. name, 'must be a UTF-8 string of 1 to 255 bytes'
          end
          c[name] = t
        end
      end
      if c.error_contains == nil and c.error_prefix == nil then
        return nil, at .. 'error_contains', 'error_contains or error_prefix is required'
      end
      if r.action ~= 'retry' and r.action ~= 'dead' then
        return nil, at .. 'action', 'must be "retry" or "dead"'
      end
      c.action = r.action
      for _, f in ipairs({ { 'delay_seconds', 0, 86400, 0 }, { 'max_times', 1, 100, 1 } }) do
        local name, v = f[1], r[f[1]]
        if v ~= nil and v ~= cjson.null then
          if c.action ~= 'retry' then return nil, at .. name, 'only for action "retry"' end
          if type(v) ~= 'number' or v ~= math.floor(v) or v < f[2] or v > f[3] then
            return nil, at .. name, string.format('must be an integer between %d and %d', f[2], f[3])
          end
          c[name] = v
        elseif c.action == 'retry' then
          c[name] = f[4]
        end
      end
      out[i] = c
    end
    return cjson.encode(out)
  end

  -- The stats fields of every rule's counters (policy_set clears them when the
  -- list changes: they count by position).
  local function rule_counter_fields()
    local f = {}
    for i = 0, RULES_MAX - 1 do
      f[#f + 1] = 'rule_' .. i .. '_retried'
      f[#f + 1] = 'rule_' .. i .. '_dead'
    end
    return f
  end

  -- The rule lists decoded so far, by their stored text. Checking and decoding
  -- a list of 20 long rules takes some 300 us, more than the rest of a failure;
  -- the library's Lua state outlives a call (until the next FUNCTION LOAD), so
  -- each list is checked once, and a failure on a queue with rules looks it up
  -- by the string HGETALL returned (Lua strings are interned: the lookup does
  -- not read the text again). Bounded: at most RULES_CACHE_MAX lists (at most
  -- some 25 KB each), then it starts again. Only what policy_set stored can be in it (the text is
  -- the key), so a change of rules is never missed.
  local RULES_CACHE_MAX = 64
  local RULES_CACHE, RULES_CACHED = {}, 0

  -- A failure of message m with error err, which makes it dead unless a rule
  -- says otherwise (`dying`: budget exhausted or retryable false). The first
  -- rule that matches err decides: "dead" makes it dead now; "retry", when
  -- dying, schedules it again after delay_seconds while the rule brought this
  -- message back fewer than max_times times (counted in m.rule_uses by the
  -- rule's text, kept in the record's trailer), else it dies as it would have.
  -- Returns whether the message goes dead, and the rule's delay (ms) when a
  -- rule schedules it. A queue without rules pays one table lookup. Rules
  -- match within err's first RULE_MATCH_BYTES.
  function flow.recover(k, m, err, dying)
    local raw = read_policy(k).dead_letter_rules
    if raw == nil then return dying end
    if #err > RULE_MATCH_BYTES then err = string.sub(err, 1, RULE_MATCH_BYTES) end
    local rules = RULES_CACHE[raw]
    if rules == nil then
      -- Read through check_rules: a value written by hand that policy_set
      -- would refuse counts as no rules rather than failing every failure.
      local canon = check_rules(raw)
      rules = canon and canon ~= '' and cjson.decode(canon) or {}
      if RULES_CACHED >= RULES_CACHE_MAX then
        RULES_CACHE, RULES_CACHED = {}, 0
      end
      RULES_CACHE[raw], RULES_CACHED = rules, RULES_CACHED + 1
    end
    for i = 1, #rules do
      local r = rules[i]
      if (r.error_prefix == nil or string.sub(err, 1, #r.error_prefix) == r.error_prefix)
         and (r.error_contains == nil or string.find(err, r.error_contains, 1, true)) then
        local counter = 'rule_' .. (i - 1) .. '_'
        if r.action == 'dead' then
          redis.call('HINCRBY', k.stats, counter .. 'dead', 1)
          return true
        end
        if not dying then return false end
        local key = (r.error_prefix or '') .. '\0' .. (r.error_contains or '')
        local uses = m.rule_uses or {}
        local n = tonumber(uses[key]) or 0
        if n >= r.max_times then
          redis.call('HINCRBY', k.stats, counter .. 'dead', 1)
          return true
        end
        uses[key] = n + 1
        m.rule_uses = uses
        redis.call('HINCRBY', k.stats, counter .. 'retried', 1)
        return false, r.delay_seconds * 1000
      end
    end
    return dying
  end

  -- The queue's alert_url (alerts_take), or nil when not set: the daemon's
  -- --alert-url applies. A value written by hand that policy_set would refuse
  -- counts as not set.
  function flow.alert_url(k)
    local url = read_policy(k).alert_url
    if url == nil or check_field('alert_url', url) == nil then return nil end
    return url
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

  -- The lease of a claim or extend: daemon_default means the caller's value is
  -- its daemon's default lease, not the request's (the ARGV "default"; it was
  -- "flag" until retryd_v5), which the policy's lease_seconds overrides.
  function flow.lease_ms(k, lease_ms, daemon_default)
    if not daemon_default then return lease_ms end
    local s = tonumber(read_policy(k).lease_seconds)
    return s and s * 1000 or lease_ms
  end

  -- The queue its deaths move to (docs/lifecycle.md "Dead-letter queue"), or
  -- nil. A value written by hand that policy_set would refuse counts as none.
  function flow.dead_letter_queue(k)
    local q = read_policy(k).dead_letter_queue
    if q == nil or check_field('dead_letter_queue', q) == nil then return nil end
    return q
  end

  -- What an expiry does: 'dead' (the default) or 'delete'.
  function flow.on_expiry(k)
    return read_policy(k).on_expiry == 'delete' and 'delete' or 'dead'
  end

  -- The retries of an enqueue that gave none: the policy's, else the caller's.
  -- "unlimited" is -1 (02_record.lua keeps it).
  function flow.max_retries(k, max_retries, defaulted)
    if not defaulted then return max_retries end
    local v = read_policy(k).max_retries
    if v == 'unlimited' then return -1 end
    return tonumber(v) or max_retries
  end

  -- The retry_after_ms of a lease expiry's failure (fail_message): 0 with
  -- lease_expiry "redeliver" (due at once), else -1 (the backoff table).
  function flow.expiry_retry_ms(k)
    return read_policy(k).lease_expiry == 'redeliver' and 0 or -1
  end

  -- The delay (ms) of an enqueue that gave none: the policy's delay_seconds,
  -- else 0.
  -- Whether the policy deduplicates by content (SQS FIFO queues).
  function flow.content_dedup(k)
    return read_policy(k).content_based_dedup == 'true'
  end

  function flow.delay_ms(k)
    local s = tonumber(read_policy(k).delay_seconds)
    return s and s * 1000 or 0
  end

  -- The policy's max_payload_bytes when a payload of `bytes` is longer, else
  -- nil. A payload of at most PAYLOAD_LIMIT_MIN bytes fits every limit, so
  -- its enqueue reads no policy for this.
  function flow.payload_over(k, bytes)
    if bytes <= PAYLOAD_LIMIT_MIN then return nil end
    local limit = tonumber(read_policy(k).max_payload_bytes)
    if limit and bytes > limit then return limit end
    return nil
  end

  -- A claim that took nothing (docs/reference.md "Claim"): the policy's
  -- wait_seconds in ms (-1 when not set), and whether the queue is known (it
  -- has a policy, or it ever had a message: its id counter or stats exist).
  -- Only then: the claim's usual path pays nothing.
  -- known: 0, 1, or 2 when the queue is sharded (docs/sharding.md "Claim:
  -- which shards"): a caller that claimed from one shard learns that others
  -- may hold its work.
  function flow.empty_claim(k)
    local p = read_policy(k)
    local s = tonumber(p.wait_seconds)
    if p.shards and tonumber(p.shards) > 1 then return s and s * 1000 or -1, 2 end
    local known = p ~= NO_POLICY or redis.call('EXISTS', k.seq, k.stats) > 0
    return s and s * 1000 or -1, known and 1 or 0
  end

  -- The expiry of an enqueue that gave no ttl: the policy's message_ttl
  -- (seconds, a canonical integer string) in ms, or nil when it has none.
  function flow.message_ttl_ms(k)
    local s = (k.flow_policy or read_policy(k)).message_ttl   -- read once per call
    if s then
      s = tonumber(s)
      if s and s > 0 then return s * 1000 end   -- 0: no expiry
    end
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
    if reason and redis.call('LLEN', k.due) + redis.call('LLEN', k.ready)
                  + (priorities_used(k) and redis.call('ZCARD', k.priority) or 0) > allowed then
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

  -- Whether a claim may lease a message of group g now (docs/fairness.md
  -- "Limits and strict order"): fifo_groups, then group_max_in_flight, then
  -- group_rate_limit, on top of what admit allowed the whole claim. A group
  -- held back leaves the rotation (groups.hold): until one of its leases ends
  -- for the first two (counted held_group_cap for the cap), until its next
  -- token for the rate (counted held_group_rate; groups.hold keeps when).
  -- Reads the group's bucket for group_spent.
  function flow.group_admit(k, g, now)
    local p = read_policy(k)
    local cap = tonumber(p.group_max_in_flight) or 0
    local fifo = p.fifo_groups == 'true'
    local rate = tonumber(p['group_rate_limit.per_second'])
    k.group_tokens = nil
    if cap <= 0 and not fifo and rate == nil then return true end
    if cap > 0 or fifo then
      local processing, scheduled = groups.busy(k, g)
      -- Strict order: none of the group processing, none waiting for a retry
      -- (scheduled).
      if fifo and (processing > 0 or scheduled > 0) then
        groups.hold(k, g)
        return false
      end
      if cap > 0 and processing >= cap then
        redis.call('HINCRBY', k.stats, 'held_group_cap', 1)
        groups.hold(k, g)
        return false
      end
    end
    local burst = tonumber(p['group_rate_limit.burst'])
    if rate and burst then
      local tokens = bucket_read(k.group_bucket .. g, rate, burst, now)
      if tokens < 1 then
        local wait = math.max(1, math.ceil((1 - tokens) * 1000 / rate))
        redis.call('HINCRBY', k.stats, 'held_group_rate', 1)
        groups.hold(k, g, now + wait)
        return false
      end
      k.group_tokens = tokens
    end
    return true
  end

  -- Whether the policy sets any per-group limit (group_max_in_flight,
  -- group_rate_limit, fifo_groups), whether it has a group_rate_limit, and
  -- whether it has group_max_in_flight or fifo_groups (the limits that hold
  -- a group until one of its leases ends).
  function flow.group_limits(k)
    local p = read_policy(k)
    local rated = p['group_rate_limit.per_second'] ~= nil
    local cap = tonumber(p.group_max_in_flight)
    local waits = (cap ~= nil and cap > 0) or p.fifo_groups == 'true'
    return rated or waits, rated, waits
  end

  -- Whether the policy has group_max_in_flight or fifo_groups: the limits
  -- that hold a group until one of its leases ends (groups.left_processing).
  function flow.group_waits(k)
    local p = read_policy(k)
    local cap = tonumber(p.group_max_in_flight)
    return (cap ~= nil and cap > 0) or p.fifo_groups == 'true'
  end

  -- Whether the policy has fifo_groups (a group's set is then ordered by
  -- enqueue, docs/fairness.md "Limits and strict order").
  function flow.fifo_groups(k)
    return read_policy(k).fifo_groups == 'true'
  end

  -- Whether s is a group name: 1-128 bytes of UTF-8 without control
  -- characters (C0, DEL), as the daemon checks before it sends one.
  function flow.valid_group(s)
    return #s >= 1 and #s <= 128 and valid_utf8(s) and not string.find(s, '[%z\1-\31\127]')
  end

  -- A claim leased one message of group g: it takes a token of the group's
  -- bucket (the level group_admit read).
  function flow.group_spent(k, g, now)
    local tokens = k.group_tokens
    if tokens == nil then return end
    k.group_tokens = nil
    local p = read_policy(k)
    bucket_write(k.group_bucket .. g, math.max(0, tokens - 1),
                 tonumber(p['group_rate_limit.per_second']), tonumber(p['group_rate_limit.burst']),
                 now)
  end

  -- The layout of a sharded queue (docs/sharding.md "Where each key goes"):
  -- the HASH "<base>:shard", absent on a queue that never had more than one
  -- shard.
  local function layout_key(k)
    return k.base .. ':shard'
  end

  -- How many shards the queue spreads over (its policy's `shards`).
  local function shard_count(p)
    return tonumber(p.shards) or 1
  end

  -- Why policy p cannot be spread over shards, and the field, or nil: each
  -- shard would hold the whole max_in_flight and rate_limit (docs/sharding.md
  -- "max_in_flight and rate_limit"), so until quotas across shards are built
  -- a queue has either shards above 1 or these limits.
  function flow.limit_across_shards(p)
    local why = 'cannot be combined with shards above 1 in this release: the limits are not yet held across shards'
    if (tonumber(p.max_in_flight) or 0) > 0 then return 'max_in_flight ' .. why, 'max_in_flight' end
    if p['rate_limit.per_second'] then return 'rate_limit ' .. why, 'rate_limit' end
    return nil
  end

  -- The sha1 (hex) of a policy table: its fields in name order, each
  -- "<name>\0<value>\0", so that a shard's copy can be told apart from
  -- shard 0's policy without sending it (docs/sharding.md "Every API over
  -- all shards").
  local function policy_digest(p)
    local names = {}
    for f in pairs(p) do names[#names + 1] = f end
    table.sort(names)
    local parts = {}
    for i = 1, #names do parts[i] = names[i] .. '\0' .. p[names[i]] .. '\0' end
    return redis.sha1hex(table.concat(parts))
  end

  -- policy_get: the queue's policy as stored.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  -- Returns a flat array field, value of the fields set (see POLICY_FIELDS;
  -- `paused` 1 while paused; `shards` once the queue had more than one):
  -- absent ones have their defaults. A sharded queue's layout follows as
  -- "layout.<field>", value pairs (06_shards.lua).
  local function add_layout(k, out)
    local layout = redis.call('HGETALL', layout_key(k))
    for i = 1, #layout, 2 do
      out[#out + 1], out[#out + 2] = 'layout.' .. layout[i], layout[i + 1]
    end
    return out
  end

  local function policy_get(keys, args)
    local k = queue_keys(keys[1])
    return add_layout(k, redis.call('HGETALL', k.policy))
  end

  -- policy_set: replace or change the queue's policy, or create it.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  mode                               "replace": the fields given are
  --                                               the whole policy (others back to
  --                                               their defaults); "merge": change
  --                                               only those given; "create": as
  --                                               replace, but only when the queue
  --                                               has no policy yet (no HASH)
  --   ARGV[2..] field, value, ...                 API names (POLICY_FIELDS); value
  --                                               "" sets the field back to its default
  -- A rate limit needs both per_second and burst. The pause is kept. The rate
  -- limit's bucket keeps the tokens it had (at most the new burst); a removed
  -- rate deletes it. Publishes the wake (a looser limit may let waiters lease).
  -- The policy's created_at and updated_at (ms) are written here, never
  -- given: created_at at the first set that leaves any field, updated_at at
  -- every set that changes one (a policy that ends up empty is deleted, its
  -- stamps with it).
  -- Returns {"ok", field, value, ...} (the policy now, as policy_get, the
  -- layout's pairs included) or
  -- {"invalid", field, why}: nothing changed; {"limited", field, why}: a
  -- max_in_flight or rate_limit on a queue with shards above 1 (nothing
  -- changed; flow.limit_across_shards). Mode "create" answers
  -- {"created", field, value, ...} when it wrote the policy, {"exists",
  -- field, value, ...} (the stored one, unchanged) when the queue had one.
  local function policy_set(keys, args)
    local k = queue_keys(keys[1])
    local mode = args[1]
    if mode ~= 'replace' and mode ~= 'merge' and mode ~= 'create' then return bad_arg('mode') end
    if #args % 2 ~= 1 then return bad_arg('pairs') end
    local old = read_policy(k)
    local new = {}
    if mode == 'merge' then
      for f, v in pairs(old) do new[f] = v end
    else
      new.paused, new.shards = old.paused, old.shards
    end
    for i = 2, #args, 2 do
      local name, value = args[i], args[i + 1]
      if POLICY_STAMPS[name] then return { 'invalid', name, 'read-only: set by the library' } end
      if POLICY_KEPT[name] then
        return { 'invalid', name, 'read-only here: set by ' .. POLICY_KEPT[name] }
      end
      if name == 'dead_letter_rules' then
        local v, field, why = check_rules(value == '' and '[]' or value)
        if v == nil then return { 'invalid', field, why } end
        if v == '' then new[name] = nil else new[name] = v end
      elseif value == '' then
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
    if (new['group_rate_limit.per_second'] == nil) ~= (new['group_rate_limit.burst'] == nil) then
      return { 'invalid', 'group_rate_limit', 'needs both per_second and burst' }
    end
    if shard_count(new) > 1 then
      local limited, field = flow.limit_across_shards(new)
      if limited then return { 'limited', field, limited } end
    end
    if mode == 'create' and old ~= NO_POLICY then
      local out = { 'exists' }
      for f, v in pairs(old) do out[#out + 1], out[#out + 2] = f, v end
      return out
    end
    local now = now_ms()
    -- The stamps: kept from the old policy, then created_at at the first
    -- set, updated_at when a field changed (the pause is pause's).
    new.created_at, new.updated_at = old.created_at, old.updated_at
    local changed, any = false, false
    for f, v in pairs(new) do
      if not POLICY_STAMPS[f] and not POLICY_KEPT[f] then
        any = true
        if old[f] ~= v then changed = true end
      end
    end
    if new.shards then any = true end   -- a sharded queue's policy keeps its stamps
    for f in pairs(old) do
      if not POLICY_STAMPS[f] and new[f] == nil then changed = true end
    end
    if any then
      new.created_at = new.created_at or int_arg(now)
      if changed or new.updated_at == nil then new.updated_at = int_arg(now) end
    else
      new.created_at, new.updated_at = nil, nil
    end
    local tokens, rate, burst = bucket_level(k, old, now)
    local flat = {}
    for f, v in pairs(new) do
      flat[#flat + 1] = f
      flat[#flat + 1] = v
    end
    if new.dead_letter_rules ~= old.dead_letter_rules then
      redis.call('HDEL', k.stats, unpack(rule_counter_fields()))
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
    local out = { mode == 'create' and 'created' or 'ok' }
    for i = 1, #flat do out[#out + 1] = flat[i] end
    return add_layout(k, out)
  end

  -- pause: pause ("1") or resume ("0") the queue's claims.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  "1" | "0"
  -- A resume publishes the wake. Returns 1 when the queue is now paused, else 0;
  -- on a sharded queue {1 or 0, shards}.
  local function pause(keys, args)
    local k = queue_keys(keys[1])
    local paused
    if args[1] == '1' then
      redis.call('HSET', k.policy, 'paused', '1')
      paused = 1
    else
      if args[1] ~= '0' then return bad_arg('paused') end
      redis.call('HDEL', k.policy, 'paused')
      notify(k)
      paused = 0
    end
    -- A sharded queue's caller copies the pause to its shards.
    local shards = redis.call('HGET', k.policy, 'shards')
    if shards and tonumber(shards) > 1 then return { paused, tonumber(shards) } end
    return paused
  end

  flow.read_policy, flow.layout_key, flow.shard_count = read_policy, layout_key, shard_count
  flow.policy_digest = policy_digest

  register('policy_get', policy_get, { 'no-writes' })
  register('policy_set', policy_set)
  register('pause', pause)
end
