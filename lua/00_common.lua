#!lua name=retryd_v3
-- retryd: the Redis Functions library. Every state change of a message is one
-- call of one function below. Files in lua/ are concatenated in name order by
-- the Makefile into build/retryd.lua and loaded with FUNCTION LOAD REPLACE.
--
-- Conventions shared by every function:
--   KEYS[1]  the queue's key base "<prefix>:{<escaped queue>}". It is never a
--            key itself; it carries the hash tag, so the caller (and Redis
--            Cluster) routes the call to the slot that holds all the queue's keys.
--   KEYS[2]  where the message id is known: "<base>:m:<id>", the message's
--            record (one STRING, docs/storage.md; a HASH written by retryd_v2
--            is read as well and rewritten in the new layout by any write).
--   Times    integer milliseconds since the Unix epoch, from Redis TIME.
--   Replies  expected outcomes are a status string first ("ok", "not_found",
--            "invalid_state", "lease_mismatch"); a message is a flat array
--            {"id", <id>, field, value, ...}. redis.error_reply is used only for
--            arguments no correct caller sends.

-- The library's name carries its API version (the first line says the same;
-- C has RD_LIBRARY_NAME in keys.h). Every function is registered as
-- "<LIBRARY>_<name>" ("retryd_v3_claim"): function names are global in Redis,
-- so versions can be loaded side by side during a rolling upgrade, each
-- daemon calling its own. Bump it whenever a function's KEYS, ARGV or reply
-- change (docs/operators.md "Rolling upgrade").
local LIBRARY = 'retryd_v3'

-- Registers one function under its versioned name; flags as for
-- redis.register_function (e.g. { 'no-writes' } for FCALL_RO).
-- shape: the KEYS it declares, checked before it runs, so that a direct
-- FCALL cannot make it act on keys of two queues (or of two messages):
--   nil        KEYS[1] alone, a queue base: it must end in "}" (its hash tag)
--   'message'  the base, then "<base>:m:<ARGV[1]>" exactly
--   'registry' KEYS[1] alone, the registry SET (45_registry.lua)
-- Anything else is refused with an error naming the KEYS expected, and
-- nothing is done.
local function register(name, callback, flags, shape)
  local nkeys = shape == 'message' and 2 or 1
  local want = shape == 'message' and '<prefix>:{<queue>} <prefix>:{<queue>}:m:<ARGV[1]>'
               or shape == 'registry' and '<prefix>:queues' or '<prefix>:{<queue>}'
  local refusal = 'ERR retryd: ' .. LIBRARY .. '_' .. name .. ' takes ' .. nkeys
                  .. (nkeys == 1 and ' key' or ' keys') .. ': KEYS must be ' .. want
  local checked = function(keys, args)
    local base = keys[1]
    if #keys ~= nkeys or (shape ~= 'registry' and string.byte(base, -1) ~= 125)
       or (nkeys == 2 and (args[1] == nil or keys[2] ~= base .. ':m:' .. args[1])) then
      return redis.error_reply(refusal)
    end
    return callback(keys, args)
  end
  redis.register_function{ function_name = LIBRARY .. '_' .. name, callback = checked,
                           flags = flags }
end

-- The per-attempt history and the claim's worker (SPEC §11, docs/dead-letters.md
-- §1): filled by 01_history.lua, called from the record codec, fail_message,
-- replay_dead, kill and reply_message below.
local history = {}

-- The queue policy's hooks (SPEC §10), filled in by 15_policy.lua: the
-- functions here call them, so they are looked up in this table at call time.
local flow = {}

-- Every key name of a queue is spelled here and nowhere else in Lua.
-- The indexes (every key that lists ids, and the due list's push counter)
-- carry their generation: "<base>:3:<name>" for retryd_v3, which holds only
-- ids whose record is a STRING; retryd_v2's "<base>:<name>" hold only ids
-- whose record is a HASH (old_keys). The rest is shared by both generations
-- (docs/storage.md "Two generations of indexes").
local function key_names(base)
  local g = base .. ':3:'
  return {
    base       = base,
    due        = g .. 'due',             -- LIST of due retries and replays, claimed
                                         -- from the right before ready
    ready      = g .. 'ready',           -- LIST of fresh ids, claimed from the right
    scheduled  = g .. 'scheduled',       -- ZSET id -> retry_after (ms)
    processing = g .. 'processing',      -- ZSET id -> lease deadline (ms)
    dead       = g .. 'dead',            -- ZSET id -> time of death (ms)
    succeeded  = g .. 'succeeded',       -- ZSET id -> time of success (ms)
    redriving  = g .. 'redriving',       -- ZSET id -> when its redrive began (ms)
    redrive_to = g .. 'redrive_to',      -- HASH id -> target queue of that redrive
    pushed     = g .. 'due_pushed',      -- STRING: ids pushed on due's far end (push_due)
    seq        = base .. ':seq',         -- STRING, last id handed out (both generations)
    stats      = base .. ':stats',       -- HASH of lifetime counters
    wake       = base .. ':wake',        -- pub/sub channel: "work may be claimable"
    errors     = base .. ':errors',      -- ZSET last_error -> dead letters with it now
    events     = base .. ':events',      -- STREAM of deaths and replays, for alerting
    timer      = base .. ':timer',       -- STRING: by when (ms) the timer schedule
                                         -- will tick this queue (need_timer)
    policy     = base .. ':policy',      -- HASH: the queue's policy (15_policy.lua)
    bucket     = base .. ':bucket',      -- STRING "<tokens> <at>": its rate limit's bucket
    claims     = base .. ':claim:',      -- + a claim's nonce: STRING "<id> <token> ..." of
                                         -- what it leased, for LOST_CLAIM_KEEP_MS
                                         -- (release_lost, 35_batch.lua)
  }
end

-- A call's table of its queue's keys. The names are built once per queue and
-- kept (a call's own scratch fields, such as the policy it read, go in the
-- table it gets, never in the kept names): building them was a twentieth of
-- a claim. At most KEY_NAMES_KEPT queues' names are kept; then they are
-- dropped all at once and built again as calls come.
local KEY_NAMES_KEPT = 1000
local kept_names, kept_count = {}, 0
local function queue_keys(base)
  local mt = kept_names[base]
  if not mt then
    if kept_count >= KEY_NAMES_KEPT then kept_names, kept_count = {}, 0 end
    mt = { __index = key_names(base) }
    kept_names[base] = mt
    kept_count = kept_count + 1
  end
  return setmetatable({}, mt)
end

-- The indexes retryd_v2 wrote (the old generation), beside the shared keys a
-- removal from them touches. retryd_v3 reads them, drains them and removes
-- ids from them; it never adds an id to them. due_pushed is a field of the
-- stats hash there. Built once per call, only by the paths that need it.
local function old_keys(k)
  local o = k.old
  if o then return o end
  local base = k.base
  o = { due = base .. ':due', ready = base .. ':ready', scheduled = base .. ':scheduled',
        processing = base .. ':processing', dead = base .. ':dead',
        succeeded = base .. ':succeeded', stats = k.stats, errors = k.errors,
        events = k.events, legacy = true }
  k.old = o
  return o
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
    sweep  = tag .. ':sweep',     -- HASH cursor, next_at, cycle_at, takes, alert_url_until
    alerts = tag .. ':alerts',    -- ZSET name -> when (ms): alerts for an --alert-url instance
  }
end

-- "<base>:idem:<key>" STRING -> id of the message enqueued with that key.
local function idempotency_key(base, key)
  return base .. ':idem:' .. key
end

-- An integer as a command argument. Lua formats a number argument with
-- "%.14g" (libc's floating-point printer, about 2,500 instructions, 13 times
-- in each settle-and-claim); "%d" costs a quarter of that, and the counts
-- up to 1000 are spelled once (on first use: the library's load-time code
-- cannot reach the string library) and kept.
-- The last larger one is kept too: a call passes its "now" more than once.
-- One outside int64 (to_int takes "1e19"), which "%d" would wrap to -2^63, or
-- NaN, is passed as the number, as before.
local INT_TEXT = {}
local INT_ARG_MAX = 2 ^ 63
local last_int, last_text
local function int_arg(n)
  local s = INT_TEXT[n]
  if s then return s end
  if n == last_int then return last_text end
  if not (n > -INT_ARG_MAX and n < INT_ARG_MAX) then return n end
  s = string.format('%d', n)
  if n >= 0 and n <= 1000 then INT_TEXT[n] = s else last_int, last_text = n, s end
  return s
end

local function message_key(base, id)
  if type(id) == 'number' then id = int_arg(id) end
  return base .. ':m:' .. id
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The message record (docs/storage.md): one STRING per message at
-- "<base>:m:<id>", a 24-byte header, the payload, and a trailer of the
-- optional fields when there are any. status, lease_expires_at and dead_at
-- are not stored: the indexes say them.
local REC_HEADER = '>BBBI6i5i5I5'
local REC_HEADER_BYTES = 24
local REC_FORMAT = 1           -- the format byte; REC_TRAILER is added when a trailer follows
local REC_TRAILER = 0x80
local REC_MAX_DELTA = 2 ^ 39 - 1
-- Offsets (0-based, for SETRANGE) of the header fields claim and settle write.
local REC_AT_UPDATED = '9'     -- updated_at delta (i5), then lease time delta (i5), serial (I5)
local REC_HEADER_LAST = '23'   -- GETRANGE's end of the header

-- A message decoded into a table: payload, retry_count, max_retries,
-- created_at, updated_at, lease_at and serial (the lease token's parts),
-- and, when present, retry_after, last_error, idempotency_key, token (a
-- lease token kept verbatim). legacy is true for a HASH of the old layout.
local function decode_record(rec)
  local fmt, rc, mr, created, dupd, dlease, serial = struct.unpack(REC_HEADER, rec)
  local m = { retry_count = rc, max_retries = mr, created_at = created,
              updated_at = created + dupd, lease_at = created + dlease, serial = serial }
  local stop = #rec
  if fmt >= REC_TRAILER then
    local n = struct.unpack('>I4', rec, #rec - 3)
    local packed = string.sub(rec, #rec - 3 - n, #rec - 4)
    local t = cmsgpack.unpack(packed)
    m.last_error, m.retry_after, m.idempotency_key, m.token = t.e, t.r, t.i, t.t
    history.decode(m, t)
    m.origin_queue, m.origin_id = t.oq, t.oi   -- a redriven message (65_redrive.lua)
    m.rule_uses = t.u
    stop = #rec - 4 - n
    m.trailer_bytes = n
    m.trailer = packed   -- what record_bytes measures of the optional fields
  end
  m.payload = string.sub(rec, REC_HEADER_BYTES + 1, stop)
  return m
end

local function clamp(n, lo, hi)
  if n < lo then return lo end
  if n > hi then return hi end
  return n
end

-- A HASH of the old layout (retryd_v2), from HGETALL, as decode_record's table.
local function decode_legacy(fields)
  local h = {}
  for i = 1, #fields, 2 do h[fields[i]] = fields[i + 1] end
  local m = { payload = h.payload or '', retry_count = tonumber(h.retry_count) or 0,
              max_retries = tonumber(h.max_retries) or 3, created_at = tonumber(h.created_at) or 0,
              last_error = h.last_error, retry_after = tonumber(h.retry_after),
              idempotency_key = h.idempotency_key, legacy = true }
  m.updated_at = tonumber(h.updated_at) or m.created_at
  m.lease_at, m.serial = m.created_at, 0
  if h.lease_token then
    local a, b = string.match(h.lease_token, '^(%x+)%.(%x+)$')
    if a and #a <= 12 and #b <= 10 then
      m.lease_at, m.serial = tonumber(a, 16), tonumber(b, 16)
    else
      m.token = h.lease_token
    end
  end
  return m
end

-- The header (format byte fmt), the payload and tail (the packed trailer or "").
local function encode_plain(m, fmt, tail)
  local created = m.created_at
  return struct.pack(REC_HEADER, fmt, clamp(m.retry_count, 0, 255), clamp(m.max_retries, 0, 255),
                     created, clamp(m.updated_at - created, -REC_MAX_DELTA, REC_MAX_DELTA),
                     clamp(m.lease_at - created, -REC_MAX_DELTA, REC_MAX_DELTA), m.serial)
         .. m.payload .. tail
end

local function encode_record(m)
  if not (m.last_error or m.retry_after or m.idempotency_key or m.token or m.worker
          or m.history or m.origin_queue or m.rule_uses) then
    return encode_plain(m, REC_FORMAT, '')   -- the usual record: no trailer table to build
  end
  local t, trailer = {}, false
  if m.last_error then t.e = m.last_error; trailer = true end
  if m.retry_after then t.r = m.retry_after; trailer = true end
  if m.idempotency_key then t.i = m.idempotency_key; trailer = true end
  if m.token then t.t = m.token; trailer = true end
  if history.encode(m, t) then trailer = true end
  if m.origin_queue then t.oq, t.oi = m.origin_queue, m.origin_id; trailer = true end
  if m.rule_uses then t.u = m.rule_uses; trailer = true end
  local fmt, tail = REC_FORMAT, ''
  if trailer then
    local packed = cmsgpack.pack(t)
    fmt, tail = REC_FORMAT + REC_TRAILER, packed .. struct.pack('>I4', #packed)
  end
  return encode_plain(m, fmt, tail)
end

-- The message at mkey, decoded (either layout), or nil when there is none.
local function load_message(mkey)
  local rec = redis.pcall('GET', mkey)
  if type(rec) == 'table' then return decode_legacy(redis.call('HGETALL', mkey)) end
  if not rec then return nil end
  return decode_record(rec)
end

-- Writes the whole record (converting an old HASH: SET replaces it).
local function store_message(mkey, m)
  redis.call('SET', mkey, encode_record(m))
end

-- A record named by an index of the old generation: a HASH there (one
-- HGETALL), read as the new layout if it is not one.
local function load_legacy(mkey)
  local h = redis.pcall('HGETALL', mkey)
  if h.err then return load_message(mkey) end
  if #h == 0 then return nil end
  return decode_legacy(h)
end

local function lease_token(m)
  return m.token or string.format('%x.%x', m.lease_at, m.serial)
end

-- The header alone, where nothing of the message is sent back (a settlement
-- answers its new state only): a table as decode_record's without payload
-- and optional fields. A record with a trailer, or an old HASH, is read whole.
local function load_header(mkey)
  local h = redis.pcall('GETRANGE', mkey, '0', REC_HEADER_LAST)
  if type(h) == 'table' then return decode_legacy(redis.call('HGETALL', mkey)) end
  if h == '' then return nil end
  if string.byte(h, 1) >= REC_TRAILER then return load_message(mkey) end
  local _, rc, mr, created, dupd, dlease, serial = struct.unpack(REC_HEADER, h)
  return { retry_count = rc, max_retries = mr, created_at = created, updated_at = created + dupd,
           lease_at = created + dlease, serial = serial }
end

-- Sets updated_at to now: 5 header bytes, or the whole record for an old HASH.
local function set_updated(mkey, m, now)
  m.updated_at = now
  if m.legacy then
    store_message(mkey, m)
  else
    redis.call('SETRANGE', mkey, REC_AT_UPDATED,
               struct.pack('>i5', clamp(now - m.created_at, -REC_MAX_DELTA, REC_MAX_DELTA)))
  end
end

-- A new lease (claim): updated_at, lease time and serial, 15 header bytes; the
-- whole record for an old HASH or one that kept an old token verbatim.
local function set_lease(mkey, m, now, serial, worker)
  m.updated_at, m.lease_at, m.serial = now, now, serial
  if m.legacy or m.token or m.worker ~= worker then
    m.token, m.worker = nil, worker
    store_message(mkey, m)
  else
    local d = clamp(now - m.created_at, -REC_MAX_DELTA, REC_MAX_DELTA)
    redis.call('SETRANGE', mkey, REC_AT_UPDATED, struct.pack('>i5i5I5', d, d, serial))
  end
end

-- A message's state is the index that holds its id. Returns the status and,
-- for processing (the lease deadline), succeeded and dead (the time), the score.
local function status_of(k, id)
  local s = redis.call('ZSCORE', k.processing, id)
  if s then return 'processing', s end
  s = redis.call('ZSCORE', k.succeeded, id)
  if s then return 'succeeded', s end
  s = redis.call('ZSCORE', k.dead, id)
  if s then return 'dead', s end
  -- A dead letter on its way to another queue (65_redrive.lua): the score is its target.
  s = k.redrive_to and redis.call('HGET', k.redrive_to, id)
  if s then return 'redriving', s end
  return 'pending'
end

local function ms_text(n)
  return string.format('%d', n)
end

-- The fields a message has only sometimes, appended to out as name, value
-- pairs (every value a string; history an array), after the ones its state
-- gives (see reply_message).
local function optional_fields(out, m, status)
  local function add(name, value)
    out[#out + 1] = name
    out[#out + 1] = value
  end
  if m.retry_after then add('retry_after', ms_text(m.retry_after)) end
  if m.last_error then add('last_error', m.last_error) end
  if m.idempotency_key then add('idempotency_key', m.idempotency_key) end
  history.reply(m, status, add)
  if m.origin_queue then
    add('origin_queue', m.origin_queue)
    add('origin_id', ms_text(m.origin_id))
  end
end

-- A message as replies carry it: {"id", id, field, value, ...}, every value a
-- string, the fields retryd_v2's hash had in that state. score: the lease
-- deadline (processing) or the time of death (dead); for a letter being
-- redriven (status_of's "redriving", shown as dead), its target queue.
local function reply_message(id, m, status, score)
  local out = { 'id', id, 'payload', m.payload,
                'status', status == 'redriving' and 'dead' or status,
                'retry_count', int_arg(m.retry_count), 'max_retries', int_arg(m.max_retries),
                'created_at', ms_text(m.created_at), 'updated_at', ms_text(m.updated_at) }
  if status == 'processing' then
    out[15], out[16] = 'lease_token', lease_token(m)
    out[17], out[18] = 'lease_expires_at', ms_text(tonumber(score))
  elseif status == 'dead' then
    out[15], out[16] = 'dead_at', ms_text(tonumber(score))
  elseif status == 'redriving' then
    out[15], out[16] = 'redriving_to', score
  end
  optional_fields(out, m, status)
  return out
end

-- A message a claim just leased, as claim and settle_claim return it: by
-- position, so that neither Redis nor the daemon spends on field names or
-- number formatting (a fifth of a claim's instructions went there):
--   {id, payload, retry_count, max_retries, created_at, updated_at,
--    lease_expires_at, lease_token}
-- the numbers as integers, then, only when the message has them, its
-- optional fields as name, value pairs as reply_message spells them.
local function leased_reply(id, m, deadline)
  local out = { id, m.payload, m.retry_count, m.max_retries, m.created_at, m.updated_at,
                deadline, lease_token(m) }
  if m.retry_after or m.last_error or m.idempotency_key or m.history or m.origin_queue
     or m.worker then
    optional_fields(out, m, 'processing')
  end
  return out
end

-- The message at mkey as a reply (its state from the indexes), or nil.
local function message_reply(k, mkey, id)
  local m = load_message(mkey)
  if not m then return nil end
  return reply_message(id, m, status_of(m.legacy and old_keys(k) or k, id))
end

-- Bounds of one call: bulk work is done in batches; callers loop.
local PROMOTE_IN_CLAIM = 100
local MAX_BATCH = 1000
-- The byte budget of one reply: a listing page, an export chunk or a batch
-- claim stops before the message that would take it past this many bytes of
-- message fields (payload, last_error, ...) as the daemon's JSON writes them
-- (escaped: record_bytes), and always carries at least one message. Listing filters scan at most this many bytes of error text per call.
local REPLY_BYTES = 4 * 1024 * 1024
local MAX_BACKOFF_S = 3600

-- A queue's timer promise lapses this long after its time if no tick came.
local TIMER_GRACE_MS = 10000

local IDEMPOTENCY_TTL_MS = 24 * 3600 * 1000
local EVENTS_MAXLEN = 10000
local ERROR_KEY_BYTES = 200
-- Upper bounds (seconds) of the retry delay histogram buckets.
local DELAY_BUCKETS = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600 }

-- The consumer group alerting instances read the events stream with
-- (docs/dead-letters.md "Alert webhooks"; its functions are in 05_alerts.lua).
local ALERT_GROUP = 'retryd-alerts'

-- XINFO GROUPS' fields of the alert group of a stream, or nil without one.
local function alert_group_info(events)
  local groups = redis.call('XINFO', 'GROUPS', events)
  for i = 1, #groups do
    local info = {}
    for j = 1, #groups[i], 2 do info[groups[i][j]] = groups[i][j + 1] end
    if info.name == ALERT_GROUP then return info end
  end
  return nil
end

-- Whether stream id a ("<ms>-<seq>") comes after stream id b.
local function stream_id_after(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if tonumber(ams) ~= tonumber(bms) then return tonumber(ams) > tonumber(bms) end
  return tonumber(aseq) > tonumber(bseq)
end

-- Appends one event to the queue's stream (trimmed to about EVENTS_MAXLEN).
-- Once alerting instances read the stream (the alert group exists), it is
-- trimmed exactly instead, and every death trimmed before the group
-- delivered it is counted in the stats as alerts_dropped.
-- s cut to at most n bytes, never inside a UTF-8 sequence (a field of flow:
-- the chunk has no room for more top-level locals).
function flow.cut_text(s, n)
  if #s <= n then return s end
  local cut = n
  while cut > 0 do
    local b = string.byte(s, cut + 1)
    if b < 0x80 or b >= 0xC0 then break end
    cut = cut - 1
  end
  return string.sub(s, 1, cut)
end

-- A failure keeps at most this many bytes of its error as last_error (whole
-- UTF-8 characters; README "A message"): every byte of it is copied
-- several times by each call that reads or rewrites the message (about 1 ms
-- of Redis per MiB per copy on a 2-core host), so a 1 MiB error made each
-- later fail of that message cost Redis 8-10 ms. The daemon cuts the same
-- way before sending (RD_LAST_ERROR_MAX, include/retryd/limits.h).
flow.ERROR_MAX_BYTES = 65536

local function emit(k, event, id, err, retries, now)
  -- An entry keeps the error's first 4 KiB (whole UTF-8 characters), all an
  -- alert carries (ALERT_ERROR_BYTES): 10000 entries of long errors would
  -- otherwise pin gigabytes.
  if err then err = flow.cut_text(err, 4096) end
  local over = redis.call('XLEN', k.events) + 1 - EVENTS_MAXLEN
  local group = over > 0 and alert_group_info(k.events)
  if not group then
    redis.call('XADD', k.events, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'event', event, 'id', id,
               'error', err or '', 'retry_count', retries or 0, 'at', now)
    return
  end
  local gone, dropped = redis.call('XRANGE', k.events, '-', '+', 'COUNT', over), 0
  for i = 1, #gone do
    if gone[i][2][2] == 'dead' and stream_id_after(gone[i][1], group['last-delivered-id']) then
      dropped = dropped + 1
    end
  end
  if dropped > 0 then redis.call('HINCRBY', k.stats, 'alerts_dropped', dropped) end
  redis.call('XADD', k.events, 'MAXLEN', EVENTS_MAXLEN, '*', 'event', event, 'id', id,
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
-- err: its last_error when the caller has read the message already.
local function leave_dead(k, mkey, id, err)
  if err == nil then
    local m = load_message(mkey)
    err = m and m.last_error
  end
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

-- The timer hint of work due at `due` (ms) that a call just created. The
-- queue's promise (k.timer) is the time by which the timer schedule will tick
-- the queue anyway: when it is at or before `due`, nothing needs writing and
-- the hint is -1. Otherwise the promise becomes `due` and the hint is the ms
-- until then: the caller passes it to `register` (docs/design.md "Timers and
-- the registry").
-- The promise is read once per call (k.timer_at, false when there is none)
-- and kept up to date by every write of it in the call.
local function need_timer(k, now, due)
  local at = k.timer_at
  if at == nil then at = tonumber(redis.call('GET', k.timer)) or false end
  if at and at <= due then
    k.timer_at = at
    return -1
  end
  local in_ms = math.max(0, due - now)
  redis.call('SET', k.timer, int_arg(due), 'PX', int_arg(in_ms + TIMER_GRACE_MS))
  k.timer_at = due
  return in_ms
end

-- The hint for a message that just finished (dead or succeeded) when the
-- caller gave its retention (ttl_ms > 0); -1 otherwise.
local function retention_hint(k, now, ttl_ms)
  ttl_ms = flow.hint_ttl(k, ttl_ms)
  if ttl_ms == nil or ttl_ms <= 0 then return -1 end
  return need_timer(k, now, now + ttl_ms)
end

-- Every push onto the far end of the due list goes through here: the
-- due_pushed counter lets a pending listing's cursor keep its place while
-- claims pop the other end (see SECTIONS in 50_read.lua).
local function push_due(k, ids)
  redis.call('LPUSH', k.due, unpack(ids))
  redis.call('INCRBY', k.pushed, int_arg(#ids))
end

-- Lifts a message of retryd_v2 (m: its HASH as decode_legacy read it) from
-- an index of the old generation into the same index of the new one, with the
-- same score, and rewrites its record in the new layout, in the same call: an
-- old index never names a STRING record, a new one never a HASH.
local function lift(k, mkey, id, m, index, score)
  redis.call('ZREM', old_keys(k)[index], id)
  redis.call('ZADD', k[index], score, id)
  m.legacy = nil
  store_message(mkey, m)
end

-- An index entry whose message record is gone (eviction under a maxmemory
-- policy, a manual DEL) is dropped from the index and counted.
local function drop_orphan(k, index, id)
  redis.call('ZREM', index, id)
  redis.call('HINCRBY', k.stats, 'orphans_removed', 1)
end

-- What a reply weighs, as REPLY_BYTES counts it: each message's payload and
-- optional fields (last_error, the history's errors, worker, idempotency
-- key: the record's trailer) as the daemon's JSON writes them (jsonw.c: a
-- control byte takes up to six bytes, "\u0001", '"' and '\\' two, anything
-- else one), plus a fixed allowance for the other fields and for each
-- history entry's. (A byte of broken UTF-8, only ever written without the
-- API, is answered as U+FFFD: counted 1, written 3.)
--
-- Escapes are counted with plain finds when a string has no control byte
-- and few quotes, else measured with cjson, which escapes the same bytes
-- (and '/' and DEL too, so it counts high), in C: about 2 ms a MiB of text,
-- 14 of control bytes. And only when they could matter: while
-- even six-fold escapes would fit, a message is taken unmeasured; near the
-- bound, what was taken unmeasured is measured once, in pieces, stopping as
-- soon as the bound is passed. A reply of small messages measures nothing.
-- One module table (the library's main chunk may hold 200 locals at most):
-- budget.new() then budget.take(b, m) per message.
local budget = {
  MESSAGE_OVERHEAD_BYTES = 1024,
  HISTORY_ENTRY_BYTES = 128,
  PIECE_BYTES = 256 * 1024,
  FEW_ESCAPES = 512,
  -- Bytes 0x00-0x1f but tab, newline and return: six on the wire
  -- ("\u0001"; \b and \f take two, counted six here). Spelled out: the
  -- library's load runs without the string library.
  CONTROL = {
    '\0', '\1', '\2', '\3', '\4', '\5', '\6', '\7', '\8', '\11', '\12', '\14', '\15', '\16',
    '\17', '\18', '\19', '\20', '\21', '\22', '\23', '\24', '\25', '\26', '\27', '\28', '\29',
    '\30', '\31'
  },
  TWO_BYTE = { '"', '\\', '\n', '\r', '\t' },
}

-- How many bytes of s are escaped in two, when s has no control byte and at
-- most FEW_ESCAPES of them; else nil. Plain finds are memchr: a MiB without
-- them is looked through in about 0.3 ms, where cjson takes 2.
function budget.few_escapes(s)
  local find, control, two = string.find, budget.CONTROL, budget.TWO_BYTE
  for i = 1, #control do
    if find(s, control[i], 1, true) then return nil end
  end
  local n = 0
  for i = 1, #two do
    local c, at = two[i], 1
    while true do
      at = find(s, c, at, true)
      if not at then break end
      n = n + 1
      if n > budget.FEW_ESCAPES then return nil end
      at = at + 1
    end
  end
  return n
end

-- The bytes escaping adds to s, or some value above cap once it passes cap.
function budget.escape_extra(s, cap)
  local n = #s
  if n <= 64 then return 5 * n end   -- cheaper to assume the worst
  local few = budget.few_escapes(s)
  if few then return few end
  local extra, step = 0, budget.PIECE_BYTES
  for i = 1, n, step do
    local piece = string.sub(s, i, i + step - 1)
    extra = extra + #cjson.encode(piece) - 2 - #piece
    if extra > cap then return extra end
  end
  return extra
end

function budget.new()
  return { bytes = 0, taken = 0, unmeasured = {}, unmeasured_bytes = 0 }
end

-- Counts m into b and answers true when it fits (the first message always
-- does); false, counting nothing that matters, when it would pass
-- REPLY_BYTES (the reply ends there).
function budget.take(b, m)
  local text = m.trailer or m.last_error or ''
  local size = #m.payload + #text + budget.MESSAGE_OVERHEAD_BYTES +
               budget.HISTORY_ENTRY_BYTES * #(m.history or {})
  local first = b.taken == 0
  if not first and b.bytes + size > REPLY_BYTES then return false end
  local text_bytes = #m.payload + #text
  local u = b.unmeasured
  u[#u + 1], u[#u + 2] = m.payload, text
  if first or b.bytes + size + 5 * (b.unmeasured_bytes + text_bytes) <= REPLY_BYTES then
    b.unmeasured_bytes = b.unmeasured_bytes + text_bytes
    b.bytes, b.taken = b.bytes + size, b.taken + 1
    return true
  end
  -- Near the bound: measure what was taken unmeasured, then this one.
  local room = REPLY_BYTES - b.bytes - size
  for i = 1, #u do
    room = room - budget.escape_extra(u[i], room)
    if room < 0 then return false end
  end
  b.unmeasured, b.unmeasured_bytes = {}, 0
  b.bytes, b.taken = REPLY_BYTES - room, b.taken + 1
  return true
end

-- Moves up to `limit` due ids from scheduled to the due list, earliest due
-- first, behind ids promoted earlier. Returns how many it moved.
local function promote_due(k, now, limit)
  local due = redis.call('ZRANGE', k.scheduled, '-inf', int_arg(now), 'BYSCORE', 'LIMIT', '0',
                         int_arg(limit))
  local n = #due
  if n == 0 then return 0 end
  redis.call('ZREM', k.scheduled, unpack(due))
  push_due(k, due)
  return n
end

-- Settles one failure of a processing message (also used for an expired lease).
-- m: the message, as load_message read it (the whole record); it is
-- updated in place and written back whole (its error and retry_after
-- change). retry_after_ms < 0 means "use the backoff table". Returns the new
-- status, and for "pending" the time the retry is due.
local function fail_message(k, base, id, now, err, retryable, retry_after_ms, m)
  err = flow.cut_text(err, flow.ERROR_MAX_BYTES)
  local mkey = message_key(base, id)
  local retries = m.retry_count + 1
  history.failed(m, now, err)
  m.retry_count, m.last_error, m.updated_at, m.token = retries, err, now, nil
  redis.call('ZREM', k.processing, id)
  flow.freed(k)
  redis.call('HINCRBY', k.stats, 'failed', '1')
  local dying, rule_ms = flow.recover(k, m, err, (not retryable) or retries >= m.max_retries)
  if dying then
    m.retry_after = nil
    store_message(mkey, m)
    redis.call('ZADD', k.dead, int_arg(now), id)
    redis.call('HINCRBY', k.stats, 'dead', '1')
    count_error(k, err, 1)
    emit(k, 'dead', id, err, retries, now)
    return 'dead'
  end
  local delay = rule_ms or retry_after_ms
  if delay < 0 then
    delay = flow.backoff_ms(k, id, retries)
  end
  local bucket = 'inf'
  for i = 1, #DELAY_BUCKETS do
    if delay <= DELAY_BUCKETS[i] * 1000 then bucket = DELAY_BUCKETS[i]; break end
  end
  redis.call('HINCRBY', k.stats, 'delay_le_' .. bucket, '1')
  redis.call('HINCRBY', k.stats, 'delay_sum_ms', int_arg(delay))
  local due = now + delay
  m.retry_after = due
  store_message(mkey, m)
  redis.call('ZADD', k.scheduled, int_arg(due), id)
  redis.call('HINCRBY', k.stats, 'retried', '1')
  return 'pending', due
end

-- Fails every lease whose deadline has passed, at most `limit` of them.
local function reclaim_expired(k, base, now, limit)
  local ids = redis.call('ZRANGE', k.processing, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  local failed = 0
  for i = 1, #ids do
    local m = load_message(message_key(base, ids[i]))
    if m then
      m.lease_expired = true
      fail_message(k, base, ids[i], now, 'lease expired', true, -1, m)
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
-- retry_after cleared). m: the message, as load_message read it. The caller
-- publishes the wake-up.
local function replay_dead(k, mkey, id, now, m)
  local err = m.last_error
  leave_dead(k, mkey, id, err or '')
  history.replayed(m, now)
  m.retry_count, m.last_error, m.retry_after, m.updated_at = 0, nil, nil, now
  m.rule_uses = nil
  store_message(mkey, m)
  push_due(k, { id })
  redis.call('HINCRBY', k.stats, 'replayed', 1)
  emit(k, 'replayed', id, err, 0, now)
end

-- Looks up a message for a transition from state `want`: returns the
-- message (load_message's table; with header_only, load_header's) and the
-- index score, or nil and the reply when it cannot go on. A HASH of
-- retryd_v2 is checked against the old indexes and, when it can go on,
-- lifted into the new ones first (the caller then handles a STRING record).
local function load_for(k, mkey, id, want, token, header_only)
  local m
  if header_only then m = load_header(mkey) else m = load_message(mkey) end
  if not m then return nil, { 'not_found' } end
  local status, score = status_of(m.legacy and old_keys(k) or k, id)
  if status ~= want then return nil, { 'invalid_state', status } end
  if token ~= '' and lease_token(m) ~= token then return nil, { 'lease_mismatch' } end
  if m.legacy then lift(k, mkey, id, m, want, score) end
  return m, score
end

-- Takes a leased message off the processing index, for a settlement that ends
-- its lease with a success: load_for(..., 'processing', ...) and the ZREM of
-- the id, where the ZREM's answer is the state check (one command fewer on
-- the worker loop). Returns the message, or nil and load_for's reply when it
-- cannot go on (then nothing changed).
local function take_leased(k, mkey, id, token, header_only)
  local m
  if header_only then m = load_header(mkey) else m = load_message(mkey) end
  if not m then return nil, { 'not_found' } end
  if not m.legacy and (token == '' or lease_token(m) == token)
     and redis.call('ZREM', k.processing, id) == 1 then
    return m
  end
  -- Not processing, another lease, or a HASH of retryd_v2 (lifted first):
  -- answered and checked as load_for does.
  local e
  m, e = load_for(k, mkey, id, 'processing', token, header_only)
  if not m then return nil, e end
  redis.call('ZREM', k.processing, id)
  return m
end
