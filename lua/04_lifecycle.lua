-- What happens to a message between the functions' checks and their
-- replies: failures (backoff, recovery rules, death), the events stream and
-- top errors, retention, replays, promotion of due retries, the state checks
-- of a settlement, and the lift of retryd_v2's messages into the new
-- indexes. Module `lifecycle`.
local lifecycle = {}
do
  local queue_keys, old_keys, message_key = common.queue_keys, common.old_keys, common.message_key
  local int_arg, now_ms, to_int, notify = common.int_arg, common.now_ms, common.to_int, common.notify
  local cut_text, need_timer, push_due = common.cut_text, common.need_timer, common.push_due
  local alert_group_info, stream_id_after = common.alert_group_info, common.stream_id_after
  local v2_seen, id_seq = common.v2_seen, common.id_seq
  local EVENTS_MAXLEN, ERROR_KEY_BYTES = common.EVENTS_MAXLEN, common.ERROR_KEY_BYTES
  local DELAY_BUCKETS = common.DELAY_BUCKETS
  local load_message, store_message, load_header = record.load_message, record.store_message,
                                                   record.load_header
  local lease_token, status_of = record.lease_token, record.status_of
  local LANE_DUE, lane_score, priority_of = record.LANE_DUE, record.lane_score, record.priority_of
  local LANE_FRESH = record.LANE_FRESH
  local priorities_used, to_due = record.priorities_used, record.to_due
  local priorities_mark = record.priorities_mark

  -- A failure keeps at most this many bytes of its error as last_error (whole
  -- UTF-8 characters; README "A message"): every byte of it is copied
  -- several times by each call that reads or rewrites the message (about 1 ms
  -- of Redis per MiB per copy on a 2-core host), so a 1 MiB error made each
  -- later fail of that message cost Redis 8-10 ms. The daemon cuts the same
  -- way before sending (RD_LAST_ERROR_MAX, include/retryd/limits.h).
  local ERROR_MAX_BYTES = 65536

  -- Appends one event to the queue's stream (trimmed to about EVENTS_MAXLEN).
  -- Once alerting instances read the stream (the alert group exists), it is
  -- trimmed exactly instead, and every death trimmed before the group
  -- delivered it is counted in the stats as alerts_dropped.
  local function emit(k, event, id, err, retries, now)
    -- An entry keeps the error's first 4 KiB (whole UTF-8 characters), all an
    -- alert carries (ALERT_ERROR_BYTES): 10000 entries of long errors would
    -- otherwise pin gigabytes.
    if err then err = cut_text(err, 4096) end
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

  -- The hint for a message that just finished (dead or succeeded) when the
  -- caller gave its retention (ttl_ms > 0); -1 otherwise.
  local function retention_hint(k, now, ttl_ms)
    ttl_ms = flow.hint_ttl(k, ttl_ms)
    if ttl_ms == nil or ttl_ms <= 0 then return -1 end
    return need_timer(k, now, now + ttl_ms)
  end

  -- Lifts a message of retryd_v2 (m: its HASH as decode_legacy read it) from
  -- an index of the old generation into the same index of the new one, with the
  -- same score, and rewrites its record in the new layout, in the same call: an
  -- old index never names a STRING record, a new one never a HASH.
  local function lift(k, mkey, id, m, index, score)
    v2_seen(k)
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

  -- Moves up to `limit` due ids from scheduled to the due list, earliest due
  -- first, behind ids promoted earlier. On a queue that used priorities, each
  -- id's priority is read from its record (GETRANGE 0 0): one of 1-9 goes
  -- into the lane instead, as a due retry that became due at its retry_after
  -- (docs/lifecycle.md "Priority"); a queue without priorities reads nothing.
  -- Returns how many it moved.
  local function promote_due(k, now, limit)
    local lane = k.known.priorities   -- priorities_used, without its call once known
    if lane == nil then lane = priorities_used(k) end
    local grouped = k.known.groups
    if grouped == nil then grouped = groups.used(k) end
    if not lane and not grouped then
      local due = redis.call('ZRANGE', k.scheduled, '-inf', int_arg(now), 'BYSCORE', 'LIMIT', '0',
                             int_arg(limit))
      local n = #due
      if n == 0 then return 0 end
      redis.call('ZREM', k.scheduled, unpack(due))
      push_due(k, due)
      return n
    end
    local rows = redis.call('ZRANGE', k.scheduled, '-inf', int_arg(now), 'BYSCORE', 'LIMIT', '0',
                            int_arg(limit), 'WITHSCORES')
    if #rows == 0 then return 0 end
    -- On a queue that uses groups each record is read whole (the group is in
    -- its trailer): a grouped id goes to its group's set (docs/fairness.md),
    -- as a due retry, or, with fifo_groups, in its enqueue order (a group's
    -- set is then ordered by id: a delayed message or a retry takes its
    -- place among the group's messages, never ahead of an earlier one).
    local ids, plain, lane = {}, {}, {}
    local fifo = grouped and flow.fifo_groups(k)
    for i = 1, #rows, 2 do
      local id = rows[i]
      ids[#ids + 1] = id
      local p, g = 0, nil
      if grouped then
        local m = load_message(message_key(k.base, id))
        if m then p, g = m.priority, m.group end
      else
        p = priority_of(k.base, id)
      end
      if g then
        if fifo then
          groups.claimable(k, g, id, lane_score(p, LANE_FRESH, id_seq(id)))
        else
          groups.claimable(k, g, id, lane_score(p, LANE_DUE, tonumber(rows[i + 1])))
        end
        groups.scheduled(k, g, -1)
      elseif p > 0 then
        lane[#lane + 1] = int_arg(lane_score(p, LANE_DUE, tonumber(rows[i + 1])))
        lane[#lane + 1] = id
      else
        plain[#plain + 1] = id
      end
    end
    redis.call('ZREM', k.scheduled, unpack(ids))
    if #plain > 0 then push_due(k, plain) end
    if #lane > 0 then
      priorities_mark(k)
      redis.call('ZADD', k.priority, unpack(lane))
    end
    if #plain + #lane > 0 then groups.ungrouped_claimable(k) end
    return #ids
  end

  -- The mark on a redrive_to value of a death's move to the queue's
  -- dead_letter_queue (and of a message move task's letter, 65_redrive.lua
  -- mode "move"): a byte no queue name has. redrive_take answers such a
  -- letter with max_retries 0, so the target gives it its own budget.
  local DEAD_LETTER_MARK = '\1'

  -- A death (docs/lifecycle.md "Dead-letter queue"): m (its last_error,
  -- history and retry_count already updated, off every index) is stored and
  -- becomes a dead letter, or, when the queue has a dead_letter_queue, starts
  -- its move there: redriving, the target recorded, the source keeping no
  -- dead letter once the move is done. The dead event fires here either way,
  -- counted as dead (and dead_lettered). Returns the new state.
  local function bury(k, mkey, id, m, now)
    local err = m.last_error
    m.retry_after = nil
    store_message(mkey, m)
    redis.call('HINCRBY', k.stats, 'dead', '1')
    emit(k, 'dead', id, err, m.retry_count, now)
    local target = flow.dead_letter_queue(k)
    if target then
      redis.call('ZADD', k.redriving, int_arg(now), id)
      redis.call('HSET', k.redrive_to, id, DEAD_LETTER_MARK .. target)
      redis.call('HINCRBY', k.stats, 'dead_lettered', '1')
      return 'redriving'
    end
    redis.call('ZADD', k.dead, int_arg(now), id)
    count_error(k, err, 1)
    return 'dead'
  end

  -- A redrive_to value: the target queue, and whether it is a death's move.
  local function redrive_target(value)
    if string.sub(value, 1, 1) == DEAD_LETTER_MARK then return string.sub(value, 2), true end
    return value, false
  end

  -- A message with an expiry is pending again (enqueue, a retry, a snooze, a
  -- release): it joins the expiring index, which the tick ends it from
  -- (docs/lifecycle.md "Expiry"). Returns its expires_at, or nil.
  local function expiry_track(k, id, m)
    local at = m.expires_at
    if at then redis.call('ZADD', k.expiring, int_arg(at), id) end
    return at
  end

  -- An expired message ends (m off every pending index and off expiring, or
  -- a processing one whose failure came after its expiry): the policy's
  -- on_expiry "delete" deletes it, else it dies with last_error err
  -- ("expired" for a pending one) and a history entry, as any death (bury:
  -- the dead_letter_queue applies). Counted as expired. Returns the state:
  -- "deleted", "dead" or "redriving".
  local function end_expired(k, mkey, id, m, now, err)
    redis.call('HINCRBY', k.stats, 'expired', '1')
    if flow.on_expiry(k) == 'delete' then
      redis.call('UNLINK', mkey)
      return 'deleted'
    end
    if err == 'expired' then history.failed(m, now, err) end
    m.last_error, m.updated_at, m.token = err, now, nil
    return bury(k, mkey, id, m, now)
  end

  -- Settles one failure of a processing message (also used for an expired lease).
  -- m: the message, as load_message read it (the whole record); it is
  -- updated in place and written back whole (its error and retry_after
  -- change). retry_after_ms < 0 means "use the backoff table". Returns the new
  -- status, and for "pending" the time the retry is due.
  local function fail_message(k, base, id, now, err, retryable, retry_after_ms, m)
    err = cut_text(err, ERROR_MAX_BYTES)
    local mkey = message_key(base, id)
    local retries = m.retry_count + 1
    history.failed(m, now, err)
    m.retry_count, m.last_error, m.updated_at, m.token = retries, err, now, nil
    redis.call('ZREM', k.processing, id)
    flow.freed(k)
    redis.call('HINCRBY', k.stats, 'failed', '1')
    -- max_retries -1: unlimited, never dies of retries (docs/reference.md
    -- "Queue policy and flow control").
    local spent = m.max_retries >= 0 and retries >= m.max_retries
    local dying, rule_ms = flow.recover(k, m, err, (not retryable) or spent)
    local g = m.group
    if dying then
      if g then groups.left_processing(k, g, flow.group_waits(k)) end
      return bury(k, mkey, id, m, now)
    end
    -- Never interrupted while processing; a failure after the expiry ends it.
    if m.expires_at and m.expires_at <= now then
      if g then groups.left_processing(k, g, flow.group_waits(k)) end
      return end_expired(k, mkey, id, m, now, err)
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
    expiry_track(k, id, m)
    if g then
      groups.scheduled(k, g, 1)
      groups.left_processing(k, g, flow.group_waits(k))
    end
    redis.call('HINCRBY', k.stats, 'retried', '1')
    return 'pending', due
  end

  -- Ends the pending messages whose expires_at has passed, at most `limit`
  -- (the tick's step; docs/lifecycle.md "Expiry"). Each leaves the index that
  -- holds it: scheduled or the lane (ZREM), or due or ready (LREM from the
  -- claim end, where the oldest are). An entry whose message is not pending
  -- any more (a stale one) is dropped. Returns how many it looked at.
  local function expire_pending(k, base, now, limit)
    local ids = redis.call('ZRANGE', k.expiring, '-inf', int_arg(now), 'BYSCORE', 'LIMIT', '0',
                           int_arg(limit))
    if #ids == 0 then return 0 end
    redis.call('ZREM', k.expiring, unpack(ids))
    for i = 1, #ids do
      local id = ids[i]
      local mkey = message_key(base, id)
      local m = load_message(mkey)
      local g = m and m.group
      local sched = m and redis.call('ZREM', k.scheduled, id) == 1
      if sched and g then groups.scheduled(k, g, -1) end
      local was = m and (sched
        or (g and groups.unclaimable(k, g, id))
        or (not g and m.priority > 0 and redis.call('ZREM', k.priority, id) == 1)
        or (not g and (redis.call('LREM', k.due, -1, id) == 1
                       or redis.call('LREM', k.ready, -1, id) == 1)))
      if was then
        end_expired(k, mkey, id, m, now, 'expired')
      end
    end
    return #ids
  end

  -- Fails every lease whose deadline has passed, at most `limit` of them:
  -- each counts as a failed attempt (retry_count + 1, a history entry with
  -- lease_expired, the death rule). The backoff table schedules the retry,
  -- unless the policy's lease_expiry is "redeliver" (flow.expiry_retry_ms):
  -- then it is due at once (SQS's visibility timeout running out).
  local function reclaim_expired(k, base, now, limit)
    local ids = redis.call('ZRANGE', k.processing, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
    local failed = 0
    local after = #ids > 0 and flow.expiry_retry_ms(k) or -1
    for i = 1, #ids do
      local m = load_message(message_key(base, ids[i]))
      if m then
        m.lease_expired = true
        fail_message(k, base, ids[i], now, 'lease expired', true, after, m)
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
    -- On a sharded queue a letter whose group may live on another shard now
    -- is replayed without its group (placement.group_here), so that no group
    -- is present on two shards; its group's order and limits no longer
    -- apply to it (docs/sharding.md; a replay placed on the group's shard is
    -- not built).
    if m.group and not lifecycle.group_here(k, m.group) then m.group = nil end
    leave_dead(k, mkey, id, err or '')
    history.replayed(m, now)
    -- A fresh budget, and no expiry: a replayed expired message would end again.
    m.retry_count, m.last_error, m.retry_after, m.updated_at = 0, nil, nil, now
    m.expires_at = nil
    m.rule_uses = nil
    store_message(mkey, m)
    to_due(k, id, m.priority, now, m.group)   -- the lane for a priority above 0; a group's set
    redis.call('HINCRBY', k.stats, 'replayed', 1)
    emit(k, 'replayed', id, err, 0, now)
  end

  -- Whether the queue uses groups: a header-only read is then one command
  -- too many (a grouped record's group is in its trailer, which load_header
  -- reads with a second command), so the record is read whole at once.
  local function groups_known(k)
    local used = k.known.groups
    if used == nil then used = groups.used(k) end
    return used
  end

  -- Looks up a message for a transition from state `want`: returns the
  -- message (load_message's table; with header_only, load_header's) and the
  -- index score, or nil and the reply when it cannot go on. A HASH of
  -- retryd_v2 is checked against the old indexes and, when it can go on,
  -- lifted into the new ones first (the caller then handles a STRING record).
  local function load_for(k, mkey, id, want, token, header_only)
    local m
    if header_only and not groups_known(k) then m = load_header(mkey) else m = load_message(mkey) end
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
    -- A success reads no optional field: the header alone, a trailer or not
    -- (a token kept verbatim in the trailer does not match the header's, so
    -- load_for below reads that record whole).
    if header_only and not groups_known(k) then m = load_header(mkey, true)
    else m = load_message(mkey) end
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

  lifecycle.bury, lifecycle.redrive_target = bury, redrive_target
  lifecycle.DEAD_LETTER_MARK = DEAD_LETTER_MARK
  lifecycle.expiry_track, lifecycle.end_expired = expiry_track, end_expired
  lifecycle.expire_pending = expire_pending
  lifecycle.emit, lifecycle.count_error, lifecycle.leave_dead = emit, count_error, leave_dead
  lifecycle.retention_hint, lifecycle.lift, lifecycle.drop_orphan = retention_hint, lift, drop_orphan
  lifecycle.promote_due, lifecycle.fail_message = promote_due, fail_message
  lifecycle.reclaim_expired, lifecycle.expire_finished = reclaim_expired, expire_finished
  lifecycle.replay_dead, lifecycle.load_for, lifecycle.take_leased = replay_dead, load_for,
                                                                     take_leased
end
