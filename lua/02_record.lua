-- The message record (docs/storage.md) and the replies that carry a
-- message: decode, encode, load and store either layout, the header writes of
-- claim and settle, a message's state from the indexes, and the priority
-- lane's helpers (where a pending id goes by its priority). Module `record`.
local record = {}
do
  local int_arg, old_keys, clamp, ms_text = common.int_arg, common.old_keys, common.clamp,
                                            common.ms_text
  local v2_seen, message_key, push_due = common.v2_seen, common.message_key, common.push_due
  local id_seq = common.id_seq

  -- The message record (docs/storage.md): one STRING per message at
  -- "<base>:m:<id>", a 24-byte header, the payload, and a trailer of the
  -- optional fields when there are any. status, lease_expires_at and dead_at
  -- are not stored: the indexes say them.
  local REC_HEADER = '>BBBI6i5i5I5'
  local REC_HEADER_BYTES = 24
  -- The format byte: REC_FORMAT + 2 * priority (0-9, bits 1-4), plus
  -- REC_TRAILER when a trailer follows (docs/lifecycle.md "What is stored"; a
  -- retryd_v4 library looks only at REC_TRAILER, so it reads such a record).
  local REC_FORMAT = 1
  local REC_TRAILER = 0x80
  local REC_MAX_PRIORITY = 9
  local REC_MAX_DELTA = 2 ^ 39 - 1
  -- Offsets (0-based, for SETRANGE) of the header fields claim and settle write.
  local REC_AT_UPDATED = '9'     -- updated_at delta (i5), then lease time delta (i5), serial (I5)
  local REC_HEADER_LAST = '23'   -- GETRANGE's end of the header
  -- retry_count and max_retries have a header byte each (0-254 exactly, 255:
  -- "255 or more"); a value past REC_COUNT_BYTE_MAX is kept in the trailer
  -- too (keys rc and mr), so it reads back exactly. max_retries -1 is
  -- "unlimited" (never dies of retries): header byte 255 with no `mr` in the
  -- trailer, so an SQS queue's message needs no trailer for it; a retryd_v6
  -- library, which reads the byte alone, sees 255 retries (docs/storage.md).
  local REC_COUNT_BYTE_MAX = 254
  local REC_UNLIMITED_BYTE = 255

  -- The priority a format byte holds (decode_record and load_header compute
  -- it inline: a call is a few hundred instructions of every claim).
  local function format_priority(fmt)
    if fmt >= REC_TRAILER then fmt = fmt - REC_TRAILER end
    return clamp(math.floor(fmt / 2), 0, REC_MAX_PRIORITY)
  end

  -- The first bytes of a trailer that holds only a group of 0-31 bytes:
  -- msgpack's map of one pair (0x81), the key "g" (a fixstr of one byte,
  -- 0xA1), then the value's fixstr header (0xA0 + its length) and bytes.
  local GROUP_ONLY = '\129\161g'

  -- A message decoded into a table: payload, retry_count, max_retries,
  -- priority, created_at, updated_at, lease_at and serial (the lease token's
  -- parts), and, when present, retry_after, last_error, idempotency_key,
  -- expires_at, token (a lease token kept verbatim), attributes (opaque
  -- bytes: the SQS face's packed MessageAttributes), first_receive (0: the
  -- first claim is to record its time; else that time, ms). legacy is true
  -- for a HASH of the old layout.
  local function decode_record(rec)
    local fmt, rc, mr, created, dupd, dlease, serial = struct.unpack(REC_HEADER, rec)
    if mr == REC_UNLIMITED_BYTE then mr = -1 end   -- unless the trailer's mr says more
    local m = { retry_count = rc, max_retries = mr, created_at = created,
                updated_at = created + dupd, lease_at = created + dlease, serial = serial,
                priority = (fmt % REC_TRAILER - REC_FORMAT) / 2 }   -- format_priority, inline
    local stop = #rec
    if fmt >= REC_TRAILER then
      local n = struct.unpack('>I4', rec, #rec - 3)
      local packed = string.sub(rec, #rec - 3 - n, #rec - 4)
      local len = n >= 4 and string.byte(packed, 4) - 0xA0   -- a fixstr: 0 to 31
      if len == n - 4 and len <= 31 and string.sub(packed, 1, 3) == GROUP_ONLY then
        -- A trailer of the group alone (the usual grouped message): read as
        -- cmsgpack.pack wrote it, without the general decode and its table.
        m.group = string.sub(packed, 5)
      else
        local t = cmsgpack.unpack(packed)
        m.last_error, m.retry_after, m.idempotency_key, m.token = t.e, t.r, t.i, t.t
        m.expires_at = t.x   -- docs/lifecycle.md "What is stored"
        history.decode(m, t)
        m.origin_queue, m.origin_id = t.oq, t.oi   -- a redriven message (65_redrive.lua)
        m.rule_uses = t.u
        m.group = t.g   -- docs/fairness.md
        if t.rc then m.retry_count = t.rc end   -- past the header byte
        if t.mr then m.max_retries = t.mr end
        m.attributes, m.first_receive = t.a, t.f   -- enqueue's ARGV[10] and flag f
      end
      stop = #rec - 4 - n
      m.trailer_bytes = n
      m.trailer = packed   -- what record_bytes measures of the optional fields
    end
    m.payload = string.sub(rec, REC_HEADER_BYTES + 1, stop)
    return m
  end

  -- A HASH of the old layout (retryd_v2), from HGETALL, as decode_record's table.
  local function decode_legacy(fields)
    local h = {}
    for i = 1, #fields, 2 do h[fields[i]] = fields[i + 1] end
    local m = { payload = h.payload or '', retry_count = tonumber(h.retry_count) or 0,
                max_retries = tonumber(h.max_retries) or 3, created_at = tonumber(h.created_at) or 0,
                last_error = h.last_error, retry_after = tonumber(h.retry_after),
                idempotency_key = h.idempotency_key, priority = 0, legacy = true }
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
    local mr = m.max_retries
    if mr < 0 then mr = 255 end   -- unlimited
    return struct.pack(REC_HEADER, fmt, clamp(m.retry_count, 0, 255), clamp(mr, 0, 255),
                       created, clamp(m.updated_at - created, -REC_MAX_DELTA, REC_MAX_DELTA),
                       clamp(m.lease_at - created, -REC_MAX_DELTA, REC_MAX_DELTA), m.serial)
           .. m.payload .. tail
  end

  local function encode_record(m)
    local fmt = REC_FORMAT
    local p = m.priority
    if p and p > 0 then fmt = REC_FORMAT + 2 * clamp(p, 0, REC_MAX_PRIORITY) end
    local wide = m.retry_count > REC_COUNT_BYTE_MAX or m.max_retries > REC_COUNT_BYTE_MAX
    if not (m.last_error or m.retry_after or m.idempotency_key or m.token or m.worker
            or m.history or m.origin_queue or m.rule_uses or m.expires_at or m.group
            or wide or m.attributes or m.first_receive) then
      return encode_plain(m, fmt, '')   -- the usual record: no trailer table to build
    end
    local t, trailer = {}, false
    if wide then
      if m.retry_count > REC_COUNT_BYTE_MAX then t.rc = m.retry_count end
      if m.max_retries > REC_COUNT_BYTE_MAX then t.mr = m.max_retries end
      trailer = true
    end
    if m.last_error then t.e = m.last_error; trailer = true end
    if m.retry_after then t.r = m.retry_after; trailer = true end
    if m.idempotency_key then t.i = m.idempotency_key; trailer = true end
    if m.expires_at then t.x = m.expires_at; trailer = true end
    if m.token then t.t = m.token; trailer = true end
    if history.encode(m, t) then trailer = true end
    if m.origin_queue then t.oq, t.oi = m.origin_queue, m.origin_id; trailer = true end
    if m.rule_uses then t.u = m.rule_uses; trailer = true end
    if m.group then t.g = m.group; trailer = true end
    if m.attributes then t.a = m.attributes; trailer = true end
    if m.first_receive then t.f = m.first_receive; trailer = true end
    local tail = ''
    if trailer then
      local packed = cmsgpack.pack(t)
      fmt, tail = fmt + REC_TRAILER, packed .. struct.pack('>I4', #packed)
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
  -- and optional fields. A record with a trailer, or an old HASH, is read
  -- whole, unless partial: then its trailer is not read (m.partial is true:
  -- no optional field, retry_count and max_retries as the header bytes say)
  -- for a success, which needs none but a lease token kept verbatim
  -- (take_leased reads the record whole when the header's token does not match).
  local function load_header(mkey, partial)
    local h = redis.pcall('GETRANGE', mkey, '0', REC_HEADER_LAST)
    if type(h) == 'table' then return decode_legacy(redis.call('HGETALL', mkey)) end
    if h == '' then return nil end
    local trailer = string.byte(h, 1) >= REC_TRAILER
    if trailer and not partial then return load_message(mkey) end
    local fmt, rc, mr, created, dupd, dlease, serial = struct.unpack(REC_HEADER, h)
    if mr == REC_UNLIMITED_BYTE then mr = -1 end   -- unless a trailer's mr says more
    return { retry_count = rc, max_retries = mr, created_at = created, updated_at = created + dupd,
             lease_at = created + dlease, serial = serial,
             priority = (fmt % REC_TRAILER - REC_FORMAT) / 2, partial = trailer or nil }
  end

  -- The priority lane (docs/lifecycle.md "Priority: one more command, only
  -- where used"): k.priority, a ZSET of the pending, claimable ids of
  -- priority 1-9 (priority 0 keeps the due and ready lists). A score orders by
  -- priority (9 first), then by class (LANE_DUE: a due retry, a replay, an id
  -- handed back; LANE_FRESH: a fresh message), then by seq (due: when it
  -- became due, ms, 0 for an id handed back, claimed next; fresh: its id's
  -- local part, id_seq, below 2^44 on every shard, so
  -- FIFO), so within one priority docs/reference.md "Claim order" holds.
  -- Every score is an exact double (below 2^49).
  local LANE_BAND = 2 ^ 44
  local LANE_DUE, LANE_FRESH = 0, 1
  local function lane_score(p, class, seq)
    return ((REC_MAX_PRIORITY - p) * 2 + class) * LANE_BAND + seq
  end

  -- Whether the queue ever used priorities: the stats field `priorities`, set
  -- by the first id that enters the lane and never cleared, read once per
  -- queue by this Lua state and kept with its names (k.known.priorities). Every
  -- writer of the lane runs in this state (the queue's master), so the kept
  -- value holds; a fresh state reads it again (and tick looks at the lane
  -- itself once a minute while it is false: 40_timer.lua). A queue that never
  -- used priorities spends no command on them.
  local function priorities_used(k)
    local known = k.known
    local used = known.priorities
    if used == nil then
      used = redis.call('HGET', k.stats, 'priorities') == '1'
      known.priorities = used
    end
    return used
  end

  -- The queue used priorities from now on.
  local function priorities_mark(k)
    if k.known.priorities == true then return end
    redis.call('HSET', k.stats, 'priorities', '1')
    k.known.priorities = true
  end

  -- Puts id (a string) in the lane: priority p (1-9), class, seq.
  local function lane_add(k, id, p, class, seq)
    priorities_mark(k)
    redis.call('ZADD', k.priority, int_arg(lane_score(p, class, seq)), id)
  end

  -- The priority of message id from its record's format byte (GETRANGE 0 0):
  -- 0 for a HASH of retryd_v2 or a record that is gone.
  local function priority_of(base, id)
    local b = redis.pcall('GETRANGE', message_key(base, id), '0', '0')
    if type(b) ~= 'string' or b == '' then return 0 end
    return format_priority(string.byte(b))
  end

  -- The group of message id (its record read whole), or nil.
  local function group_of(base, id)
    local m = load_message(message_key(base, id))
    return m and m.group
  end

  -- Where a pending id goes, by its group g (nil: none) and priority p (nil
  -- or 0: none). A grouped id goes to its group's claimable set, scored as
  -- the lane (docs/fairness.md); an ungrouped one as below, and on a queue
  -- that uses groups its member of the rotation joins:
  --   to_ready      a fresh message: the far end of ready, or the lane (fresh, seq its id)
  --   to_due        a retry made due, a replay (seq: when it became due): the
  --                 far end of due (push_due), or the lane
  --   to_claim_end  an id handed back (release, a lost claim): the claim end
  --                 of due, or first of its priority in the lane; p nil: read
  --                 from the record, only on a queue that used priorities
  local function to_ready(k, id, p, g)
    if g then return groups.claimable(k, g, id, lane_score(p or 0, LANE_FRESH, id_seq(id))) end
    if p and p > 0 then lane_add(k, id, p, LANE_FRESH, id_seq(id))
    else redis.call('LPUSH', k.ready, id) end
    groups.ungrouped_claimable(k)
  end

  local function to_due(k, id, p, seq, g)
    if g then return groups.claimable(k, g, id, lane_score(p or 0, LANE_DUE, seq)) end
    if p and p > 0 then lane_add(k, id, p, LANE_DUE, seq) else push_due(k, { id }) end
    groups.ungrouped_claimable(k)
  end

  local function to_claim_end(k, base, id, p, g)
    if g then return groups.claimable(k, g, id, lane_score(p or 0, LANE_DUE, 0)) end
    if p == nil then p = priorities_used(k) and priority_of(base, id) or 0 end
    if p > 0 then lane_add(k, id, p, LANE_DUE, 0) else redis.call('RPUSH', k.due, id) end
    groups.ungrouped_claimable(k)
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
  -- whole record for an old HASH, one that kept an old token verbatim, or the
  -- second claim of a message enqueued with flag f. Its first claim costs
  -- nothing more: while the trailer's f is 0, the header's lease time of a
  -- message claimed before (serial > 0) is the first receive (only claims
  -- write the lease time: first_receive_of); the second claim moves it into
  -- f before it writes its own lease time.
  local function set_lease(mkey, m, now, serial, worker)
    local refirst = m.first_receive == 0 and m.serial > 0
    if refirst then m.first_receive = m.lease_at end
    m.updated_at, m.lease_at, m.serial = now, now, serial
    if m.legacy or m.token or m.worker ~= worker or refirst then
      m.token, m.worker = nil, worker
      store_message(mkey, m)
    else
      local d = clamp(now - m.created_at, -REC_MAX_DELTA, REC_MAX_DELTA)
      redis.call('SETRANGE', mkey, REC_AT_UPDATED, struct.pack('>i5i5I5', d, d, serial))
    end
  end

  -- When message m was first claimed (ms), or nil: never, or not enqueued
  -- with flag f. f is 0 until a second claim stores the first one's time
  -- (set_lease); till then the lease time is the first claim's.
  local function first_receive_of(m)
    local first = m.first_receive
    if first == 0 then return m.serial > 0 and m.lease_at or nil end
    return first
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
    -- A death's move to the dead_letter_queue marks it with a "\1" (04_lifecycle.lua).
    s = k.redrive_to and redis.call('HGET', k.redrive_to, id)
    if s then return 'redriving', string.byte(s, 1) == 1 and string.sub(s, 2) or s end
    return 'pending'
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
    local p = m.priority
    if p and p > 0 then add('priority', int_arg(p)) end
    if m.expires_at then add('expires_at', ms_text(m.expires_at)) end
    if m.group then add('group', m.group) end
    if m.attributes then add('attributes', m.attributes) end
    local first = first_receive_of(m)
    if first then add('first_received_at', ms_text(first)) end
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
       or m.worker or m.expires_at or m.priority ~= 0 or m.attributes or m.first_receive then
      optional_fields(out, m, 'processing')
    elseif m.group then
      out[9], out[10] = 'group', m.group   -- the one optional field (docs/fairness.md)
    end
    return out
  end

  -- The message at mkey as a reply (its state from the indexes), or nil.
  -- With b, a reply's budget (common.budget): false when the message does
  -- not fit in it (enqueue_many's duplicates share one reply).
  local function message_reply(k, mkey, id, b)
    local m = load_message(mkey)
    if not m then return nil end
    if b and not common.budget.take(b, m) then return false end
    if m.legacy then v2_seen(k) end
    return reply_message(id, m, status_of(m.legacy and old_keys(k) or k, id))
  end

  record.decode_legacy, record.load_message, record.store_message = decode_legacy, load_message,
                                                                    store_message
  record.load_legacy, record.lease_token, record.load_header = load_legacy, lease_token, load_header
  record.set_updated, record.set_lease, record.status_of = set_updated, set_lease, status_of
  record.optional_fields, record.reply_message = optional_fields, reply_message
  record.first_receive_of = first_receive_of
  record.leased_reply, record.message_reply = leased_reply, message_reply
  record.LANE_BAND, record.LANE_DUE, record.LANE_FRESH = LANE_BAND, LANE_DUE, LANE_FRESH
  record.lane_score, record.priorities_used, record.priorities_mark = lane_score, priorities_used,
                                                                      priorities_mark
  record.lane_add, record.priority_of, record.group_of = lane_add, priority_of, group_of
  record.to_ready, record.to_due, record.to_claim_end = to_ready, to_due, to_claim_end
end
