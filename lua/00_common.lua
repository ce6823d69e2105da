#!lua name=retryd_v2
-- retryd: the Redis Functions library. Every state change of a message is one
-- call of one function below. Files in lua/ are concatenated in name order by
-- the Makefile into build/retryd.lua and loaded with FUNCTION LOAD REPLACE.
--
-- Conventions shared by every function:
--   KEYS[1]  the queue's key base "<prefix>:{<escaped queue>}". It is never a
--            key itself; it carries the hash tag, so the caller (and Redis
--            Cluster) routes the call to the slot that holds all the queue's keys.
--   KEYS[2]  where the message id is known: "<base>:m:<id>".
--   Times    integer milliseconds since the Unix epoch, from Redis TIME.
--   Replies  expected outcomes are a status string first ("ok", "not_found",
--            "invalid_state", "lease_mismatch"); a message is a flat array
--            {"id", <id>, field, value, ...}. redis.error_reply is used only for
--            arguments no correct caller sends.

-- The library's name carries its API version (the first line says the same;
-- C has RD_LIBRARY_NAME in keys.h). Every function is registered as
-- "<LIBRARY>_<name>" ("retryd_v2_claim"): function names are global in Redis,
-- so versions can be loaded side by side during a rolling upgrade, each
-- daemon calling its own. Bump it whenever a function's KEYS, ARGV or reply
-- change (docs/operators.md "Rolling upgrade").
local LIBRARY = 'retryd_v2'

-- Registers one function under its versioned name; flags as for
-- redis.register_function (e.g. { 'no-writes' } for FCALL_RO).
local function register(name, callback, flags)
  redis.register_function{ function_name = LIBRARY .. '_' .. name, callback = callback,
                           flags = flags }
end

-- The queue policy's hooks (SPEC §10), filled in by 15_policy.lua: the
-- functions here call them, so they are looked up in this table at call time.
local flow = {}

-- Every key name of a queue is spelled here and nowhere else in Lua.
local function queue_keys(base)
  return {
    due        = base .. ':due',         -- LIST of due retries and replays, claimed
                                         -- from the right before ready
    ready      = base .. ':ready',       -- LIST of fresh ids, claimed from the right
    scheduled  = base .. ':scheduled',   -- ZSET id -> retry_after (ms)
    processing = base .. ':processing',  -- ZSET id -> lease deadline (ms)
    dead       = base .. ':dead',        -- ZSET id -> time of death (ms)
    succeeded  = base .. ':succeeded',   -- ZSET id -> time of success (ms)
    seq        = base .. ':seq',         -- STRING, last id handed out
    stats      = base .. ':stats',       -- HASH of lifetime counters
    wake       = base .. ':wake',        -- pub/sub channel: "work may be claimable"
    errors     = base .. ':errors',      -- ZSET last_error -> dead letters with it now
    events     = base .. ':events',      -- STREAM of deaths and replays, for alerting
    timer      = base .. ':timer',       -- STRING: by when (ms) the timer schedule
                                         -- will tick this queue (need_timer)
    policy     = base .. ':policy',      -- HASH: the queue's policy (15_policy.lua)
    bucket     = base .. ':bucket',      -- STRING "<tokens> <at>": its rate limit's bucket
  }
end

-- The registry SET and its companions. They live in the registry's slot, not
-- in any queue's: they take the registry key as their hash tag, or share the
-- one it already has.
local function registry_keys(registry)
  local open = string.find(registry, '{', 1, true)
  local close = open and string.find(registry, '}', open + 1, true)
  local tag = '{' .. registry .. '}'
  if close and close > open + 1 then tag = registry end
  return {
    set    = registry,            -- SET of queue names (SPEC §2)
    names  = tag .. ':names',     -- ZSET name -> 0: the same names, paged by name
    timers = tag .. ':timers',    -- ZSET name -> when (ms) the timer must tick it
    taken  = tag .. ':taken',     -- HASH name -> token of the timer round ticking it
    sweep  = tag .. ':sweep',     -- HASH cursor, next_at, cycle_at, takes
  }
end

-- "<base>:idem:<key>" STRING -> id of the message enqueued with that key.
local function idempotency_key(base, key)
  return base .. ':idem:' .. key
end

local function message_key(base, id)
  return base .. ':m:' .. id
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Bounds of one call: bulk work is done in batches; callers loop.
local PROMOTE_IN_CLAIM = 100
local MAX_BATCH = 1000
-- The byte budget of one reply: a listing page, an export chunk or a batch
-- claim stops before the message that would take it past this many bytes of
-- message fields (payload, last_error, ...), and always carries at least one
-- message. Listing filters scan at most this many bytes of error text per call.
local REPLY_BYTES = 4 * 1024 * 1024
local MAX_BACKOFF_S = 3600

-- A queue's timer promise lapses this long after its time if no tick came.
local TIMER_GRACE_MS = 10000

local IDEMPOTENCY_TTL_MS = 24 * 3600 * 1000
local EVENTS_MAXLEN = 10000
local ERROR_KEY_BYTES = 200
-- Upper bounds (seconds) of the retry delay histogram buckets.
local DELAY_BUCKETS = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600 }

-- Appends one event to the queue's stream (trimmed to about EVENTS_MAXLEN).
local function emit(k, event, id, err, retries, now)
  redis.call('XADD', k.events, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', event, 'id', id,
             'error', err or '', 'retry_count', retries or 0, 'at', now)
end

-- The error text top_errors groups by: at most ERROR_KEY_BYTES, cut before a
-- UTF-8 continuation byte so a character is never split, marked with "...".
local function error_key(err)
  err = err or ''
  if #err <= ERROR_KEY_BYTES then return err end
  local cut = ERROR_KEY_BYTES
  while cut > 0 do
    local b = string.byte(err, cut + 1)
    if b < 0x80 or b >= 0xC0 then break end
    cut = cut - 1
  end
  return string.sub(err, 1, cut) .. '...'
end

-- top_errors counts the dead letters that are dead now, by error text.
local function count_error(k, err, by)
  local key = error_key(err)
  local n = tonumber(redis.call('ZINCRBY', k.errors, by, key))
  if n <= 0 then redis.call('ZREM', k.errors, key) end
end

-- A dead letter leaves the dead set (replay, delete, purge, retention).
-- err: its last_error when the caller has read it already.
local function leave_dead(k, mkey, id, err)
  if err == nil then err = redis.call('HGET', mkey, 'last_error') end
  redis.call('ZREM', k.dead, id)
  count_error(k, err, -1)
end

-- Wakes long-poll waiters on every retryd subscribed to the queue. The message
-- carries nothing: receivers claim through the atomic functions.
local function notify(k)
  redis.call('PUBLISH', k.wake, '1')
end

local function bad_arg(name)
  return redis.error_reply('ERR retryd: bad argument ' .. name)
end

local function to_int(s)
  local n = tonumber(s)
  if n == nil or n ~= math.floor(n) or n == math.huge or n == -math.huge then return nil end
  return n
end

-- A message as replies carry it, from its hash's HGETALL.
local function reply_of(id, fields)
  local out = { 'id', id }
  for i = 1, #fields do out[#out + 1] = fields[i] end
  return out
end

-- The timer hint of work due at `due` (ms) that a call just created. The
-- queue's promise (k.timer) is the time by which the timer schedule will tick
-- the queue anyway: when it is at or before `due`, nothing needs writing and
-- the hint is -1. Otherwise the promise becomes `due` and the hint is the ms
-- until then: the caller passes it to `register` (docs/design.md "Timers and
-- the registry").
local function need_timer(k, now, due)
  local at = tonumber(redis.call('GET', k.timer))
  if at and at <= due then return -1 end
  local in_ms = math.max(0, due - now)
  redis.call('SET', k.timer, due, 'PX', in_ms + TIMER_GRACE_MS)
  return in_ms
end

-- The hint for a message that just finished (dead or succeeded) when the
-- caller gave its retention (ttl_ms > 0); -1 otherwise.
local function retention_hint(k, now, ttl_ms)
  ttl_ms = flow.hint_ttl(k, ttl_ms)
  if ttl_ms == nil or ttl_ms <= 0 then return -1 end
  return need_timer(k, now, now + ttl_ms)
end

local function message_reply(mkey, id)
  return reply_of(id, redis.call('HGETALL', mkey))
end

-- Every push onto the far end of the due list goes through here: the
-- due_pushed counter lets a pending listing's cursor keep its place while
-- claims pop the other end (see SECTIONS in 50_read.lua).
local function push_due(k, ids)
  redis.call('LPUSH', k.due, unpack(ids))
  redis.call('HINCRBY', k.stats, 'due_pushed', #ids)
end

-- An index entry whose message hash is gone (eviction under a maxmemory
-- policy, a manual DEL) is dropped from the index and counted.
local function drop_orphan(k, index, id)
  redis.call('ZREM', index, id)
  redis.call('HINCRBY', k.stats, 'orphans_removed', 1)
end

-- What a message weighs in a reply, as REPLY_BYTES counts it: its two
-- fields of unbounded size plus a fixed allowance for the others.
local MESSAGE_OVERHEAD_BYTES = 1024
local function message_bytes(mkey)
  return redis.call('HSTRLEN', mkey, 'payload') + redis.call('HSTRLEN', mkey, 'last_error')
         + MESSAGE_OVERHEAD_BYTES
end

-- The same weight from a hash already read with HGETALL.
local function fields_bytes(fields)
  local n = MESSAGE_OVERHEAD_BYTES
  for i = 1, #fields, 2 do
    if fields[i] == 'payload' or fields[i] == 'last_error' then n = n + #fields[i + 1] end
  end
  return n
end

-- Moves up to `limit` due ids from scheduled to the due list, earliest due
-- first, behind ids promoted earlier. Returns how many it moved.
local function promote_due(k, now, limit)
  local due = redis.call('ZRANGE', k.scheduled, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  local n = #due
  if n == 0 then return 0 end
  redis.call('ZREM', k.scheduled, unpack(due))
  push_due(k, due)
  return n
end

-- Settles one failure of a processing message (also used for an expired lease).
-- retry_after_ms < 0 means "use the backoff table". Returns the new status,
-- and for "pending" the time the retry is due.
local function fail_message(k, base, id, now, err, retryable, retry_after_ms)
  local mkey = message_key(base, id)
  local retries = to_int(redis.call('HGET', mkey, 'retry_count')) or 0
  local max_retries = to_int(redis.call('HGET', mkey, 'max_retries')) or 3
  retries = retries + 1
  redis.call('ZREM', k.processing, id)
  redis.call('HDEL', mkey, 'lease_token', 'lease_expires_at')
  flow.freed(k)
  redis.call('HINCRBY', k.stats, 'failed', 1)
  if (not retryable) or retries >= max_retries then
    redis.call('HSET', mkey, 'status', 'dead', 'retry_count', retries,
               'last_error', err, 'updated_at', now, 'dead_at', now)
    redis.call('HDEL', mkey, 'retry_after')
    redis.call('ZADD', k.dead, now, id)
    redis.call('HINCRBY', k.stats, 'dead', 1)
    count_error(k, err, 1)
    emit(k, 'dead', id, err, retries, now)
    return 'dead'
  end
  local delay = retry_after_ms
  if delay < 0 then
    delay = flow.backoff_ms(k, id, retries)
  end
  local bucket = 'inf'
  for i = 1, #DELAY_BUCKETS do
    if delay <= DELAY_BUCKETS[i] * 1000 then bucket = DELAY_BUCKETS[i]; break end
  end
  redis.call('HINCRBY', k.stats, 'delay_le_' .. bucket, 1)
  redis.call('HINCRBY', k.stats, 'delay_sum_ms', delay)
  local due = now + delay
  redis.call('HSET', mkey, 'status', 'pending', 'retry_count', retries,
             'last_error', err, 'updated_at', now, 'retry_after', due)
  redis.call('ZADD', k.scheduled, due, id)
  redis.call('HINCRBY', k.stats, 'retried', 1)
  return 'pending', due
end

-- Fails every lease whose deadline has passed, at most `limit` of them.
local function reclaim_expired(k, base, now, limit)
  local ids = redis.call('ZRANGE', k.processing, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  local failed = 0
  for i = 1, #ids do
    if redis.call('EXISTS', message_key(base, ids[i])) == 1 then
      fail_message(k, base, ids[i], now, 'lease expired', true, -1)
      failed = failed + 1
    else
      redis.call('ZREM', k.processing, ids[i])  -- deleted while leased
    end
  end
  if failed > 0 then
    redis.call('HINCRBY', k.stats, 'lease_expired', failed)
  end
  return #ids
end

-- Deletes finished messages older than ttl_ms from one index (0 keeps forever).
local function expire_finished(k, base, index, now, ttl_ms, limit, counter)
  if ttl_ms <= 0 then return 0 end
  local ids = redis.call('ZRANGE', index, '-inf', now - ttl_ms, 'BYSCORE', 'LIMIT', 0, limit)
  local n = #ids
  if n == 0 then return 0 end
  for i = 1, n do
    local mkey = message_key(base, ids[i])
    if index == k.dead then leave_dead(k, mkey, ids[i]) end
    redis.call('UNLINK', mkey)
  end
  redis.call('ZREM', index, unpack(ids))
  redis.call('HINCRBY', k.stats, counter, n)
  return n
end

-- A dead letter goes back to pending with a fresh retry budget, claimed
-- before fresh messages (reference: retry_count 0, last_error and
-- retry_after cleared). The caller publishes the wake-up; err is its
-- last_error when the caller has read it already.
local function replay_dead(k, mkey, id, now, err)
  if err == nil then err = redis.call('HGET', mkey, 'last_error') end
  leave_dead(k, mkey, id, err)
  redis.call('HDEL', mkey, 'last_error', 'retry_after', 'dead_at')
  redis.call('HSET', mkey, 'status', 'pending', 'retry_count', 0, 'updated_at', now)
  push_due(k, { id })
  redis.call('HINCRBY', k.stats, 'replayed', 1)
  emit(k, 'replayed', id, err, 0, now)
end

-- Looks up a message for a transition; returns nil, reply when it cannot go on.
local function load_for(mkey, want_status, token)
  local cur = redis.call('HMGET', mkey, 'status', 'lease_token')
  if not cur[1] then return nil, { 'not_found' } end
  if cur[1] ~= want_status then return nil, { 'invalid_state', cur[1] } end
  if token ~= '' and cur[2] ~= token then return nil, { 'lease_mismatch' } end
  return cur[1]
end

