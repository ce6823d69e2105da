-- enqueue: the one function that creates a message.
do
  local IDEMPOTENCY_TTL_MS, bad_arg = common.IDEMPOTENCY_TTL_MS, common.bad_arg
  local idempotency_key, int_arg = common.idempotency_key, common.int_arg
  local message_key, need_timer, notify = common.message_key, common.need_timer, common.notify
  local now_ms, queue_keys, register = common.now_ms, common.queue_keys, common.register
  local to_int, budget, next_id = common.to_int, common.budget, common.next_id
  local message_reply, store_message = record.message_reply, record.store_message
  local LANE_FRESH, lane_add, priorities_mark = record.LANE_FRESH, record.lane_add,
                                                record.priorities_mark
  local lane_score = record.lane_score
  local series_start = timeseries.series_start
  local expiry_track = lifecycle.expiry_track
  -- SQS's largest message: the attributes alone may take as much.
  local MAX_ATTRIBUTE_BYTES = 262144

  -- enqueue: create a pending message.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  payload                            opaque bytes, stored as given
  --   ARGV[2]  max_retries                        integer 1..10
  --   ARGV[3]  delay_ms                           integer >= 0; > 0 schedules it; ""
  --                                               (or absent): none given, the
  --                                               policy's delay_seconds applies
  --                                               (flow.delay_ms), else 0
  --   ARGV[4]  idempotency_key                    "" for none; else 1..255 bytes
  --   ARGV[5]  "1" (optional)                     the caller forwards timer hints
  --   ARGV[6]  "default" (optional, with ARGV[5]) the request gave no max_retries:
  --                                               the queue policy's replaces ARGV[2]
  --                                               ("request" or "": it does not)
  --   ARGV[7]  ttl_ms (optional, after ARGV[6])   integer 1..2592000000: the message
  --                                               expires that long after now
  --                                               (expires_at); "" or absent: none
  --                                               given, the policy's message_ttl
  --                                               applies (flow.message_ttl_ms)
  --   ARGV[8]  priority (optional, with ARGV[7])  integer 0..9 ("": 0); 1-9 goes into
  --                                               the priority lane (docs/lifecycle.md
  --                                               "Priority"), claimed highest first
  --   ARGV[9]  group (optional, with ARGV[8])     1-128 bytes ("": none): the message's
  --                                               fairness group (docs/fairness.md)
  --   ARGV[10] attributes (optional, with ARGV[9]) opaque bytes, at most 262144 ("": none):
  --                                               kept in the record's trailer and answered
  --                                               as the field `attributes` by every reply
  --                                               that carries the message (the SQS face
  --                                               keeps its packed MessageAttributes here)
  --   ARGV[11] idempotency window (optional, after ARGV[10])  ms, 1..86400000: how long
  --                                               ARGV[4] dedups ("" or "0": 24 h)
  --   ARGV[12] flags (optional, after ARGV[11])   letters ("": none): "e" the queue must
  --                                               exist (a policy or a message ever, and
  --                                               no drop_queue running), else nothing is
  --                                               written and the reply is {"not_found"};
  --                                               "f" record the first claim's time
  --                                               (first_received_at, ms: the lease time
  --                                               until a second claim keeps it in the
  --                                               trailer; record.set_lease);
  --                                               "c" the idempotency key is the body's
  --                                               hash: refused with {"invalid_state",
  --                                               "no_content_dedup"} unless the policy
  --                                               has content_based_dedup (SQS FIFO);
  --                                               "o" only if present: the message's
  --                                               group has messages on this shard, or
  --                                               its key is live here (a duplicate),
  --                                               else nothing is written and the
  --                                               reply is {"moved"} (docs/sharding.md
  --                                               "Enqueue: which shard")
  --   ARGV[13] rev (optional, after ARGV[12])     the layout's rev of the caller's view
  --                                               of a sharded queue ("": none): a
  --                                               placement the view is wrong for is
  --                                               refused, {"reshard"} or {"copy"}
  --                                               (placement.refusal), nothing written
  -- Returns {"ok", id, now_ms}: the caller has every other field already, so
  -- the message is not read back (a third of enqueue's cost); with ARGV[5],
  -- {"ok", id, now_ms, timer}: the timer hint of a delayed message
  -- (need_timer), -1 otherwise; with ARGV[6] too, then the max_retries the
  -- message got; with ARGV[7] (as the daemon always sends), always
  -- {"ok", id, now_ms, timer, max_retries, expires_at (ms) or -1} (timer -1
  -- without ARGV[5] "1"), and retry_after (ms) after them when the policy's
  -- delay_seconds applied (ARGV[3] ""), which the caller cannot know. Or {"duplicate",
  -- message} when the key was used in this queue within 24 h: the original
  -- message, nothing created; when that message was deleted since (retention),
  -- {"duplicate", {"id", id}}. {"not_found"}: flag "e" and no such queue.
  -- {"invalid_state", "no_content_dedup"}: flag "c" on a queue without it.
  -- Or {"too_large", limit}: the payload is longer than the policy's
  -- max_payload_bytes (limit), nothing created.
  -- Publishes on the queue's wake channel when the message is ready now.
  --
  -- One item of enqueue or enqueue_many, the one place an enqueue's rules
  -- live: args[o + 1 .. o + width] are enqueue's ARGV[1..width] (enqueue's
  -- own ARGV, o = 0, width 12: those it was not given are nil; an
  -- enqueue_many item's block, width 9 or 12). k: the call's queue_keys
  -- (the policy is read once per call, into k). mode:
  --   nil     enqueue: the whole enqueue, its reply
  --   CHECK   only the arguments: nil when they are good, else the error
  --           reply; nothing read, nothing written
  --   BATCH   an enqueue_many item: as nil, at the call's clock `now`; the
  --           wake-up and the count are left to the call (k.to_wake: one
  --           PUBLISH for all; k.enqueued: one HINCRBY), and a duplicate
  --           whose original does not fit the call's reply (k.budget)
  --           returns false, nothing done for it
  local CHECK, BATCH = 1, 2
  local function enqueue_item(k, base, args, o, width, now, mode)
    local payload = args[o + 1]
    local max_retries = to_int(args[o + 2])
    local delay_ms = args[o + 3] or ''
    if delay_ms ~= '' then delay_ms = to_int(delay_ms) end
    if payload == nil then return bad_arg('payload') end
    if max_retries == nil or max_retries < 1 or max_retries > 10 then return bad_arg('max_retries') end
    if delay_ms == nil or (delay_ms ~= '' and delay_ms < 0) then return bad_arg('delay_ms') end
    local idem = args[o + 4] or ''
    if #idem > 255 then return bad_arg('idempotency_key') end
    local hinting = args[o + 5] == '1'
    local ttl_ms, priority = args[o + 7], args[o + 8]
    if ttl_ms == '' then
      ttl_ms = nil
    elseif ttl_ms then
      ttl_ms = to_int(ttl_ms)
      if ttl_ms == nil or ttl_ms < 1 or ttl_ms > 2592000000 then return bad_arg('ttl_ms') end
    end
    if priority == '' or priority == nil then
      priority = 0
    else
      priority = to_int(priority)
      if priority == nil or priority < 0 or priority > 9 then return bad_arg('priority') end
    end
    local group = args[o + 9]
    if group == '' then group = nil end
    if group and not flow.valid_group(group) then return bad_arg('group') end
    -- ARGV[10..12]: one test when they are not given (the HTTP API's enqueue).
    local attributes, window, first_receive = width > 9 and args[o + 10], IDEMPOTENCY_TTL_MS, nil
    local flags
    if attributes then
      if attributes == '' then attributes = nil end
      if attributes and #attributes > MAX_ATTRIBUTE_BYTES then return bad_arg('attributes') end
      local w = args[o + 11]
      flags = args[o + 12]
      if w and w ~= '' and w ~= '0' then
        window = to_int(w)
        if window == nil or window < 1 or window > IDEMPOTENCY_TTL_MS then
          return bad_arg('idempotency_window_ms')
        end
      end
      if flags == '' then flags = nil end
      if flags and string.find(flags, '[^efco]') then return bad_arg('flags') end
    end
    if mode == CHECK then return nil end
    if flags then
      -- The queue must exist: only the queue's own keys can say so in its
      -- slot (the registry is another slot), so a policy or a message ever
      -- (seq). Once it does, it does for the rest of the call (k.exists).
      if string.find(flags, 'e', 1, true) and not k.exists then
        if redis.call('EXISTS', k.dropping) == 1 or redis.call('EXISTS', k.policy, k.seq) == 0 then
          return { 'not_found' }
        end
        k.exists = true
      end
      if string.find(flags, 'f', 1, true) then first_receive = 0 end
      -- Only if present (a placement during a raise): a group elsewhere, or a
      -- key not seen here, goes to the shard the caller tries next.
      if string.find(flags, 'o', 1, true) then
        if group and not redis.call('ZSCORE', k.group_names, group) then return { 'moved' } end
        if not group and (idem == '' or not redis.call('GET', idempotency_key(base, idem))) then
          return { 'moved' }
        end
      end
      -- The key is the body's hash: only a queue with content_based_dedup
      -- takes it (SQS's FIFO rule), decided in this call.
      if string.find(flags, 'c', 1, true) and not flow.content_dedup(k) then
        return { 'invalid_state', 'no_content_dedup' }
      end
    end
    max_retries = flow.max_retries(k, max_retries, args[o + 6] == 'default')
    local defaulted = delay_ms == ''
    if defaulted then delay_ms = flow.delay_ms(k) end   -- none given: the policy's
    -- No policy limit is below PAYLOAD_LIMIT_MIN (1024): a payload that fits
    -- it reads nothing for the check.
    if #payload > 1024 then
      local limit = flow.payload_over(k, #payload)
      if limit then return { 'too_large', limit } end
    end

    -- A single enqueue that skipped the placement check (enqueue above) is
    -- checked now if the policy it read is a sharded queue's: a caller
    -- without a view learns the layout, and places by it.
    if mode == nil then
      local p = k.flow_policy
      if p and p.shards and not k.placed then
        local refused = placement.refusal(k, nil, false)
        if refused then return refused end
      end
    end
    if not now then now = now_ms() end
    local idem_key
    if idem ~= '' then
      idem_key = idempotency_key(base, idem)
      local seen = redis.call('GET', idem_key)
      if seen then
        -- An enqueue_many's originals share its reply's bytes (k.budget): one
        -- that does not fit ends the call before this item (false).
        local msg = message_reply(k, message_key(base, seen), seen, mode and k.budget)
        if msg == false then return false end
        return { 'duplicate', msg or { 'id', seen } }
      end
    end
    local timer = -1
    -- A shard that handed out all its ids takes no more (docs/sharding.md "Ids").
    local id = next_id(k)
    if not id then return { 'full' } end
    local id_arg = int_arg(id)
    if id == k.id_base + 1 then series_start(base, now) end  -- docs/series.md
    local mkey = message_key(base, id_arg)
    if idem_key then
      redis.call('SET', idem_key, id_arg, 'PX', int_arg(window))
    end
    local m = { payload = payload, retry_count = 0, max_retries = max_retries, created_at = now,
                updated_at = now, lease_at = now, serial = 0 }
    if priority > 0 then m.priority = priority end
    if group then m.group = group end
    if idem_key then m.idempotency_key = idem end
    -- Set only when given: a nil stored into a key the table lacks makes Lua
    -- 5.1 grow (rehash) it.
    if attributes then m.attributes = attributes end
    if first_receive then m.first_receive = first_receive end
    if ttl_ms == nil then ttl_ms = flow.message_ttl_ms(k) end   -- none given: the policy's
    if ttl_ms then m.expires_at = now + ttl_ms end
    -- The expiry's time is on the timer's schedule: the tick ends it then.
    if expiry_track(k, id_arg, m) and hinting then timer = need_timer(k, now, m.expires_at) end
    if delay_ms > 0 then
      m.retry_after = now + delay_ms
      store_message(mkey, m)
      redis.call('ZADD', k.scheduled, int_arg(now + delay_ms), id_arg)
      if group then groups.scheduled(k, group, 1) end
      -- Its promotion reads the priority only on a queue that used priorities.
      if priority > 0 then priorities_mark(k) end
      if hinting then
        local t = need_timer(k, now, now + delay_ms)
        if t >= 0 and (timer < 0 or t < timer) then timer = t end
      end
    else
      store_message(mkey, m)
      if group then
        groups.claimable(k, group, id_arg, lane_score(priority, LANE_FRESH, id - k.id_base))
      else
        if priority > 0 then
          lane_add(k, id_arg, priority, LANE_FRESH, id - k.id_base)
        else
          redis.call('LPUSH', k.ready, id_arg)
        end
        groups.ungrouped_claimable(k)
      end
      if mode then k.to_wake = true else notify(k) end
    end
    -- An enqueue_many counts its messages once, at its end.
    if mode then k.enqueued = k.enqueued + 1 else redis.call('HINCRBY', k.stats, 'enqueued', '1') end
    if args[o + 7] then
      if defaulted and delay_ms > 0 then   -- the policy's delay: the caller cannot know it
        return { 'ok', id, now, timer, max_retries, m.expires_at or -1, m.retry_after }
      end
      return { 'ok', id, now, timer, max_retries, m.expires_at or -1 }
    end
    if hinting and args[o + 6] then return { 'ok', id, now, timer, max_retries } end
    if hinting then return { 'ok', id, now, timer } end
    return { 'ok', id, now }
  end

  local function enqueue(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    -- The placement check (placement.refusal) where it can refuse; today's
    -- call (shard 0, no view, no group, no key) is checked in enqueue_item
    -- only once the policy it reads there for its defaults says the queue
    -- is sharded.
    local rev, group, idem = args[13], args[9], args[4]
    if rev or (group and group ~= '') or (idem and idem ~= '') or k.shard ~= 0 then
      if rev == '' then rev = nil end
      local refused = placement.refusal(k, rev, (group or '') ~= '' or (idem or '') ~= '')
      if refused then return refused end
      k.placed = true
    end
    return enqueue_item(k, base, args, 0, 12, nil, nil)
  end

  register('enqueue', enqueue)

  -- enqueue_many: create up to MANY_ITEMS messages in one call, each exactly
  -- as an enqueue of its own would (the same enqueue_item: idempotency, the
  -- policy's defaults, too_large, flags, groups, priority, ttl, delay), in
  -- order, so a key repeated within the call makes the later item a
  -- duplicate of the earlier one, as two enqueues in a row would.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  n                                  items, 1..100
  --   ARGV[2]  width                              9 or 12: the ARGV of enqueue each
  --                                               item's block has (9: ARGV[1..9], none
  --                                               of attributes, window, flags)
  --   ARGV[3 + width (i - 1) .. 2 + width i]      item i: enqueue's ARGV[1..width], all
  --                                               given ("" where enqueue takes "" for
  --                                               none)
  --   ARGV[3 + width n] (optional)                the caller's rev, as enqueue's ARGV[13]:
  --                                               {"reshard"} or {"copy"} for the whole
  --                                               call, nothing written
  -- Bounded: at most MANY_ITEMS items and MANY_BYTES (1 MiB) of payloads and
  -- attributes together (one item alone may be larger: every call makes
  -- progress). A byte of payload costs Redis about 3 ns in this call (the
  -- record's concatenation and the collector it drives), so a call at the
  -- bound takes about 4 ms (docs/benchmarks.md "Batch enqueue"). Every item's arguments are checked before anything is
  -- written: a bad one (or a call past the bounds) is refused with an error
  -- reply naming it, and nothing is written.
  -- Returns {timer, reply_1, ..., reply_j}: reply_i is what enqueue answers
  -- for item i's ARGV (so {"ok", id, now_ms, timer, max_retries,
  -- expires_at or -1[, retry_after]} or {"duplicate", msg} / {"too_large",
  -- limit} / {"not_found"} / {"invalid_state", "no_content_dedup"}); timer,
  -- the call's hint for `register`: the smallest of the items' (-1: none).
  -- The originals that duplicates answer are bounded by REPLY_BYTES together
  -- (as a batch claim's messages): j < n when item j + 1's original would
  -- pass it. Nothing was done for items j + 1 .. n: the caller sends them
  -- again (j >= 1: every call makes progress).
  -- The clock, the policy and the key names are read once per call, the
  -- stats' enqueued counted once, and the wake channel is published once
  -- when any item is ready now.
  local MANY_ITEMS, MANY_BYTES = 100, 1024 * 1024
  local function enqueue_many(keys, args)
    local base = keys[1]
    local n, width = to_int(args[1]), to_int(args[2])
    if n == nil or n < 1 or n > MANY_ITEMS or (width ~= 9 and width ~= 12)
       or (#args ~= 2 + width * n and #args ~= 3 + width * n) then
      return redis.error_reply('ERR retryd: enqueue_many takes n (1-' .. MANY_ITEMS
                               .. '), a width (9 or 12) and that many arguments per item')
    end
    local k = queue_keys(base)
    local bytes, sensitive = 0, false
    for i = 1, n do
      local o = 2 + width * (i - 1)
      local bad = enqueue_item(k, base, args, o, width, nil, CHECK)
      if bad then
        bad.err = bad.err .. ' (item ' .. i .. ')'
        return bad
      end
      bytes = bytes + #args[o + 1] + (width > 9 and #args[o + 10] or 0)
      if args[o + 4] ~= '' or args[o + 9] ~= '' then sensitive = true end
    end
    if n > 1 and bytes > MANY_BYTES then
      return redis.error_reply('ERR retryd: enqueue_many takes at most ' .. MANY_BYTES
                               .. ' bytes of payloads and attributes in one call')
    end
    local rev = args[3 + width * n]
    if rev == '' then rev = nil end
    local refused = placement.refusal(k, rev, sensitive)
    if refused then return refused end
    local now = now_ms()
    local out, timer = { -1 }, -1
    k.budget, k.enqueued = budget.new(), 0
    for i = 1, n do
      local r = enqueue_item(k, base, args, 2 + width * (i - 1), width, now, BATCH)
      if r == false then break end
      out[i + 1] = r
      local t = r[1] == 'ok' and r[4] or -1
      if t >= 0 and (timer < 0 or t < timer) then timer = t end
    end
    out[1] = timer
    if k.enqueued > 0 then redis.call('HINCRBY', k.stats, 'enqueued', int_arg(k.enqueued)) end
    if k.to_wake then notify(k) end
    return out
  end

  register('enqueue_many', enqueue_many)
end
