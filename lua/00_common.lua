#!lua name=retryd_v9
-- retryd: the Redis Functions library. Every state change of a message is one
-- call of one function below. Files in lua/ are concatenated in name order by
-- the Makefile into build/retryd.lua and loaded with FUNCTION LOAD REPLACE.
--
-- The library as modules (docs/design.md "The Functions library"). Lua 5.1
-- (Redis's) refuses a chunk with more than 200 active locals, and the whole
-- library is one chunk, so the main chunk holds one local per module and
-- nothing else. Each file is one module:
--   local <module> = {}      the module table, the file's only top-level local
--   do                       its body: locals here stop counting at `end`
--     local a, b = common.a, common.b    what it uses of earlier modules,
--                                        copied into locals once (an upvalue
--                                        costs less than a table field)
--     ... local functions, register(...) of the library functions ...
--     <module>.x = x         what later modules may use
--   end
-- A file without exports is just `do ... end`. A module uses only modules of
-- files before it (the name order): nothing is filled in later. Mind the 60
-- upvalues a Lua 5.1 function may have (the locals of its block it uses).
--   00_common     key names, integer arguments, time, bounds, timer hints,
--                 the reply budget, register()
--   01_history    the per-attempt history in the record's trailer
--   02_record     the message record: decode, encode, load, store, replies;
--                 the priority lane's helpers (where a pending id goes)
--   03_policy     the queue policy and flow control (module `flow`)
--   04_lifecycle  failures, deaths, events, retention, replays, retryd_v2 lifts
--   05_alerts, 05_series, 06_shards, 10_enqueue ... 70_export: the functions
--
-- Conventions shared by every function:
--   KEYS[1]  the queue's key base "<prefix>:{<escaped queue>}". It is never a
--            key itself; it carries the hash tag, so the caller (and Redis
--            Cluster) routes the call to the slot that holds all the queue's keys.
--            A shard k >= 1 of a sharded queue is "<prefix>:{<escaped queue>:<k>.<salt>}"
--            (docs/sharding.md): the functions act on that shard alone.
--   KEYS[2]  where the message id is known: "<base>:m:<id>", the message's
--            record (one STRING, docs/storage.md; a HASH written by retryd_v2
--            is read as well and rewritten in the new layout by any write).
--   Times    integer milliseconds since the Unix epoch, from Redis TIME.
--   Replies  expected outcomes are a status string first ("ok", "not_found",
--            "invalid_state", "lease_mismatch"); a message is a flat array
--            {"id", <id>, field, value, ...}. redis.error_reply is used only for
--            arguments no correct caller sends.

local common = {}
do

  -- The library's name carries its API version (the first line says the same;
  -- C has RD_LIBRARY_NAME in keys.h). Every function is registered as
  -- "<LIBRARY>_<name>" ("retryd_v9_claim"): function names are global in Redis,
  -- so versions can be loaded side by side during a rolling upgrade, each
  -- daemon calling its own. Bump it whenever a function's KEYS, ARGV or reply
  -- change (docs/operators.md "Rolling upgrade").
  local LIBRARY = 'retryd_v9'

  -- Registers one function under its versioned name; flags as for
  -- redis.register_function (e.g. { 'no-writes' } for FCALL_RO).
  -- shape: the KEYS it declares, checked before it runs, so that a direct
  -- FCALL cannot make it act on keys of two queues (or of two messages):
  --   nil        KEYS[1] alone, a queue base: it must end in its hash tag ":{...}"
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
      -- A queue base ends in its own hash tag ":{<escaped name>}" (the name's
      -- braces are escaped, so the tag holds none); the registry is
      -- "<prefix>:queues".
      if #keys ~= nkeys
         or (shape == 'registry' and string.sub(base, -7) ~= ':queues')
         or (shape ~= 'registry' and not string.find(base, '^.*:{[^{}]*}$'))
         or (nkeys == 2 and (args[1] == nil or keys[2] ~= base .. ':m:' .. args[1])) then
        return redis.error_reply(refusal)
      end
      return callback(keys, args)
    end
    redis.register_function{ function_name = LIBRARY .. '_' .. name, callback = checked,
                             flags = flags }
  end

  -- Every key name of a queue is spelled here and nowhere else in Lua.
  -- The indexes (every key that lists ids, and the due list's push counter)
  -- carry their generation: "<base>:3:<name>" for retryd_v3, which holds only
  -- ids whose record is a STRING; retryd_v2's "<base>:<name>" hold only ids
  -- whose record is a HASH (old_keys). The rest is shared by both generations
  -- (docs/storage.md "Two generations of indexes").
  -- A sharded queue (docs/sharding.md) spreads over shards 0..N-1, each a base
  -- of its own: shard 0 is the queue's "<prefix>:{<q>}", shard k (1-63) is
  -- "<prefix>:{<q>:<k>.<salt>}". The escape of a name turns every ':' into
  -- %3A, so a tag with a ':' is never a queue's shard 0. A shard's ids are
  -- k * SHARD_SPAN + n, n its own counter (seq) from 1; its functions publish
  -- on the queue's one wake channel (shard 0's), the payload naming the shard.
  local SHARD_SPAN = 10 ^ 13
  local function shard_of_base(base)
    -- Most bases are shard 0 and end in a name, not a salt: one byte tells
    -- (a shard's base ends "<digit>}"), before the pattern's backtracking.
    local last = string.byte(base, -2)
    if not last or last < 48 or last > 57 then return 0, base end
    local head, q, shard, salt = string.match(base, '^(.*:{)([^{}:]*):([1-9]%d?)%.(%d+)}$')
    shard = tonumber(shard)
    if not shard or shard > 63 or #salt > 5 or tonumber(salt) > 65535
       or (#salt > 1 and string.sub(salt, 1, 1) == '0') then
      return 0, base
    end
    return shard, head .. q .. '}'
  end

  local function key_names(base)
    local g = base .. ':3:'
    local shard, base0 = shard_of_base(base)
    return {
      base       = base,
      shard      = shard,                  -- not a key: the shard's index, 0-63
      id_base    = shard * SHARD_SPAN,     -- not a key: what its ids start after
      wake_payload = shard == 0 and '1' or 's' .. shard,   -- not a key: notify's message
      due        = g .. 'due',             -- LIST of due retries and replays, claimed
                                           -- from the right before ready
      ready      = g .. 'ready',           -- LIST of fresh ids, claimed from the right
      priority   = g .. 'priority',        -- ZSET: the priority lane, claimable ids of
                                           -- priority 1-9 (record.lane_score), popped
                                           -- before due and ready (docs/lifecycle.md)
      scheduled  = g .. 'scheduled',       -- ZSET id -> retry_after (ms)
      expiring   = g .. 'expiring',        -- ZSET id -> expires_at (ms) of the pending
                                           -- messages that have one (docs/lifecycle.md
                                           -- "Expiry": the tick ends them)
      processing = g .. 'processing',      -- ZSET id -> lease deadline (ms)
      dead       = g .. 'dead',            -- ZSET id -> time of death (ms)
      succeeded  = g .. 'succeeded',       -- ZSET id -> time of success (ms)
      redriving  = g .. 'redriving',       -- ZSET id -> when its redrive began (ms)
      redrive_to = g .. 'redrive_to',      -- HASH id -> target queue of that redrive
      pushed     = g .. 'due_pushed',      -- STRING: ids pushed on due's far end (push_due)
      -- Fairness groups (docs/fairness.md), only on a queue that uses them:
      group_ids  = g .. 'gq:',             -- + group: ZSET of the group's claimable ids
                                           -- (scored as the priority lane)
      rotation   = g .. 'rotation',        -- LIST of groups, least recently served first
      rotating   = g .. 'rotating',        -- SET: the same names (none twice in the LIST)
      held       = g .. 'gheld',           -- ZSET group -> when (ms) its rate limit has a
                                           -- token again
      waiting    = g .. 'gwaiting',        -- SET: groups the cap or strict order holds back
      group_bucket = g .. 'gbucket:',      -- + group: STRING, its rate limit's bucket
      group_names = g .. 'groups',         -- ZSET group -> 0: the groups with messages
      gcount     = g .. 'gcount',          -- HASH i<group>: processing, s<group>: scheduled
      grouped    = g .. 'grouped',         -- ZSET id -> id: the ids in every group's set
                                           -- (listings and counts walk it)
      strays     = g .. 'strays',          -- SET: groups present here that a raise of
                                           -- shards placed elsewhere (docs/sharding.md
                                           -- "When the raise settles", shard_scan)
      seq        = base .. ':seq',         -- STRING, last id handed out (both generations)
      stats      = base .. ':stats',       -- HASH of lifetime counters
      wake       = base0 .. ':wake',       -- pub/sub channel: "work may be claimable",
                                           -- the queue's (shard 0's) for every shard
      errors     = base .. ':errors',      -- ZSET last_error -> dead letters with it now
      events     = base .. ':events',      -- STREAM of deaths and replays, for alerting
      timer      = base .. ':timer',       -- STRING: by when (ms) the timer schedule
                                           -- will tick this queue (need_timer)
      policy     = base .. ':policy',      -- HASH: the queue's policy (03_policy.lua)
      bucket     = base .. ':bucket',      -- STRING "<tokens> <at>": its rate limit's bucket
      tags       = base .. ':tags',        -- HASH tag -> value (66_tags.lua)
      moves      = base .. ':moves',       -- ZSET task id -> task id: the queue's last
                                           -- message move tasks (67_moves.lua)
      move       = base .. ':move:',       -- + task id: HASH, one move task's state
      dropping   = base .. ':dropping',    -- STRING: a drop_queue runs (46_drop.lua)
      claims     = base .. ':claim:',      -- + a claim's nonce: STRING "<id> <token> ..." of
                                           -- what it leased, for LOST_CLAIM_KEEP_MS
                                           -- (release_lost, 35_batch.lua)
      v2         = {},                     -- not a key: what this Lua state knows of
                                           -- retryd_v2's data in the queue (v2_seen)
      known      = {},                     -- not a key: what this Lua state knows of the
                                           -- queue's use of features (priorities: whether
                                           -- it used the lane, record.priorities_used)
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
  -- stats hash there. Built on first use, only by the paths that need it, and
  -- kept with the queue's names.
  local function old_keys(k)
    local v2 = k.v2
    local o = v2.keys
    if o then return o end
    local base = k.base
    o = { due = base .. ':due', ready = base .. ':ready', scheduled = base .. ':scheduled',
          processing = base .. ':processing', dead = base .. ':dead',
          succeeded = base .. ':succeeded', stats = k.stats, errors = k.errors,
          events = k.events, legacy = true }
    v2.keys = o
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
      set    = registry,            -- SET of queue names (docs/design.md "Where the state lives")
      names  = tag .. ':names',     -- ZSET name -> 0: the same names, paged by name
      timers = tag .. ':timers',    -- ZSET name -> when (ms) the timer must tick it
      taken  = tag .. ':taken',     -- HASH name -> token of the timer round ticking it
      sweep  = tag .. ':sweep',     -- HASH cursor, next_at, cycle_at, takes, alert_url_until
      alerts = tag .. ':alerts',    -- ZSET name -> when (ms): alerts for an --alert-url instance
      dlq    = tag .. ':dlq',       -- HASH name -> its dead_letter_queue (dlq_link)
      moves  = tag .. ':moves',     -- ZSET name -> when (ms) to look at its move task's
                                    -- lease (67_moves.lua)
    }
  end

  -- "<base>:idem:<key>" STRING -> id of the message enqueued with that key.
  local function idempotency_key(base, key)
    return base .. ':idem:' .. key
  end

  -- "<target base>:redrive:<source queue>:<source id>" STRING -> the id a
  -- redriven letter got in the target (65_redrive.lua; drop_queue deletes it).
  -- The id is digits, so the last ':' splits it from any queue name.
  local function redrive_key(base, src_queue, src_id)
    -- A number is written with %d: concatenation would print a 15-digit id
    -- (a shard's, docs/sharding.md "Ids") as 6.3e+14, the same for many.
    if type(src_id) == 'number' then src_id = string.format('%d', src_id) end
    return base .. ':redrive:' .. src_queue .. ':' .. src_id
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

  -- Whether retryd_v2's indexes may hold ids of the queue (docs/storage.md "Two
  -- generations of indexes"). Only a retryd_v2 instance adds ids to them, and
  -- it marks nothing, so retryd_v3 learns of them by meeting its data: a HASH
  -- record, or an old index that tick's probe (v2_probe, 40_timer.lua) finds.
  -- What it met is kept in this Lua state with the queue's names (k.v2), never
  -- in Redis (a Lua state of a fresh load, a replica promoted, knows nothing:
  -- each queue's first tick probes):
  --   until_ms  v2 data was met within OLD_ACTIVE_MS before then: a claim that
  --             its own lists did not fill pops the old ones, and every tick
  --             drains them (a v2 instance may still be enqueuing)
  --   probe_at  otherwise, when a tick looks at the old indexes next (one EXISTS)
  -- So a queue without v2 data pays nothing for the old generation in claim,
  -- settle_claim and tick, but one EXISTS per OLD_PROBE_MS in a tick.
  local OLD_ACTIVE_MS = 600000
  local OLD_PROBE_MS = 60000

  local function v2_seen(k, now)
    k.v2.until_ms = (now or now_ms()) + OLD_ACTIVE_MS
  end

  local function v2_active(k, now)
    local u = k.v2.until_ms
    return u ~= nil and now < u
  end


  local function clamp(n, lo, hi)
    if n < lo then return lo end
    if n > hi then return hi end
    return n
  end

  local function ms_text(n)
    return string.format('%d', n)
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

  -- s cut to at most n bytes, never inside a UTF-8 sequence.
  local function cut_text(s, n)
    if #s <= n then return s end
    local cut = n
    while cut > 0 do
      local b = string.byte(s, cut + 1)
      if b < 0x80 or b >= 0xC0 then break end
      cut = cut - 1
    end
    return string.sub(s, 1, cut)
  end

  -- Wakes long-poll waiters on every retryd subscribed to the queue. The message
  -- names only the shard ("1" for shard 0, "s<k>" for shard k): receivers
  -- claim through the atomic functions.
  local function notify(k)
    redis.call('PUBLISH', k.wake, k.wake_payload)
  end

  -- The next id of k's shard (a number), or nil when the shard has handed
  -- out all SHARD_SPAN - 1 of its ids (the caller answers {"full"}).
  local function next_id(k)
    local n = redis.call('INCR', k.seq)
    if n >= SHARD_SPAN then return nil end
    return k.id_base + n
  end

  -- The local part of id (a string or number): its place in its shard's
  -- order (n of k * SHARD_SPAN + n), what orders fresh ids in the lane.
  local function id_seq(id)
    return tonumber(id) % SHARD_SPAN
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

  -- Every push onto the far end of the due list goes through here: the
  -- due_pushed counter lets a pending listing's cursor keep its place while
  -- claims pop the other end (see SECTIONS in 50_read.lua).
  local function push_due(k, ids)
    redis.call('LPUSH', k.due, unpack(ids))
    redis.call('INCRBY', k.pushed, int_arg(#ids))
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
    -- unmeasured (the strings taken without measuring) is made at the second
    -- message: most replies carry one, and a table is a few thousand
    -- instructions of a claim's budget.
    return { bytes = 0, taken = 0, unmeasured_bytes = 0 }
  end

  -- Counts m into b and answers true when it fits (the first message always
  -- does); false, counting nothing that matters, when it would pass
  -- REPLY_BYTES (the reply ends there).
  function budget.take(b, m)
    local text = m.trailer or m.last_error or ''
    local history = m.history
    local text_bytes = #m.payload + #text
    local size = text_bytes + budget.MESSAGE_OVERHEAD_BYTES +
                 (history and budget.HISTORY_ENTRY_BYTES * #history or 0)
    if b.taken == 0 then
      b.first_payload, b.first_text = m.payload, text
      b.unmeasured_bytes, b.bytes, b.taken = text_bytes, size, 1
      return true
    end
    if b.bytes + size > REPLY_BYTES then return false end
    local u = b.unmeasured
    if u == nil then
      u = { b.first_payload, b.first_text }
      b.unmeasured = u
    end
    u[#u + 1], u[#u + 2] = m.payload, text
    if b.bytes + size + 5 * (b.unmeasured_bytes + text_bytes) <= REPLY_BYTES then
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

  -- What the later modules use.
  common.LIBRARY, common.register = LIBRARY, register
  common.queue_keys, common.old_keys, common.registry_keys = queue_keys, old_keys, registry_keys
  common.idempotency_key, common.message_key = idempotency_key, message_key
  common.redrive_key = redrive_key
  common.int_arg, common.now_ms, common.clamp, common.ms_text = int_arg, now_ms, clamp, ms_text
  common.OLD_PROBE_MS, common.v2_seen, common.v2_active = OLD_PROBE_MS, v2_seen, v2_active
  common.PROMOTE_IN_CLAIM, common.MAX_BATCH, common.REPLY_BYTES = PROMOTE_IN_CLAIM, MAX_BATCH, REPLY_BYTES
  common.MAX_BACKOFF_S, common.TIMER_GRACE_MS = MAX_BACKOFF_S, TIMER_GRACE_MS
  common.IDEMPOTENCY_TTL_MS, common.EVENTS_MAXLEN = IDEMPOTENCY_TTL_MS, EVENTS_MAXLEN
  common.ERROR_KEY_BYTES, common.DELAY_BUCKETS = ERROR_KEY_BYTES, DELAY_BUCKETS
  common.ALERT_GROUP, common.alert_group_info = ALERT_GROUP, alert_group_info
  common.stream_id_after, common.cut_text = stream_id_after, cut_text
  common.notify, common.bad_arg, common.to_int = notify, bad_arg, to_int
  common.SHARD_SPAN, common.next_id, common.id_seq = SHARD_SPAN, next_id, id_seq
  common.need_timer, common.push_due, common.budget = need_timer, push_due, budget
end
