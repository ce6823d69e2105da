-- Settlements of one message: succeed, fail, snooze, extend, replay. Module `settle`.
local settle = {}
do
  local bad_arg, int_arg, need_timer = common.bad_arg, common.int_arg, common.need_timer
  local notify, now_ms, queue_keys = common.notify, common.now_ms, common.queue_keys
  local register, to_int = common.register, common.to_int
  local reply_message, set_updated = record.reply_message, record.set_updated
  local store_message = record.store_message
  local fail_message, load_for = lifecycle.fail_message, lifecycle.load_for
  local replay_dead, retention_hint = lifecycle.replay_dead, lifecycle.retention_hint
  local take_leased, expiry_track = lifecycle.take_leased, lifecycle.expiry_track
  local death_hint = alerts.death_hint

  -- Moves a processing message (checked by load_for, m its message) to
  -- succeeded at now: the indexes and 5 header bytes (updated_at). The caller
  -- counts it in the stats (once per call for a batch).
  -- m: as take_leased returned it (the id is off the processing index).
  local function succeed_message(k, mkey, id, now, m)
    set_updated(mkey, m, now)
    redis.call('ZADD', k.succeeded, int_arg(now), id)
    if m.group then groups.left_processing(k, m.group, flow.group_waits(k)) end
  end

  -- succeed: a processing message is done.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   KEYS[2]  <prefix>:{q}:m:<id>                the message
  --   ARGV[1]  id
  --   ARGV[2]  lease_token                        "" accepts any current lease
  --   ARGV[3]  succeeded_ttl_ms (optional)        given by a caller that forwards
  --                                               timer hints: its retention
  -- Returns {"ok", message} | {"not_found"} | {"invalid_state", status} |
  -- {"lease_mismatch"}; with ARGV[3], {"ok", message, timer}: the hint of its
  -- retention expiry (need_timer).
  local function succeed(keys, args)
    local base, mkey, id, token = keys[1], keys[2], args[1], args[2] or ''
    local ttl = to_int(args[3] or '0')
    if ttl == nil then return bad_arg('succeeded_ttl_ms') end
    local k = queue_keys(base)
    local m, err = take_leased(k, mkey, id, token)
    if not m then return err end
    local now = now_ms()
    succeed_message(k, mkey, id, now, m)
    flow.freed(k)
    redis.call('HINCRBY', k.stats, 'succeeded', '1')
    local msg = reply_message(id, m, 'succeeded')
    if args[3] == nil then return { 'ok', msg } end
    return { 'ok', msg, retention_hint(k, now, ttl) }
  end

  -- The longest snooze: 30 days, as enqueue's delay_seconds (RD_DELAY_SECONDS_MAX).
  local SNOOZE_MAX_MS = 2592000000

  -- Moves a processing message back to pending, due at `due` (ms): scheduled
  -- with retry_after = due, a snooze mark in its history; retry_count and
  -- last_error stay (docs/reference.md "Snooze"). The whole record is written
  -- (retry_after and the history are in its trailer). The caller counts it
  -- (snoozed) and frees the lease's place (flow.freed).
  -- m: as take_leased returned it, read whole (the id is off the processing index).
  local function snooze_message(k, mkey, id, now, due, m)
    history.snoozed(m, now, due)
    m.updated_at, m.retry_after, m.token = now, due, nil
    store_message(mkey, m)
    redis.call('ZADD', k.scheduled, int_arg(due), id)
    if m.group then
      groups.scheduled(k, m.group, 1)
      groups.left_processing(k, m.group, flow.group_waits(k))
    end
    -- Pending again: an expiry ends it even while snoozed (the tick, at its
    -- expires_at; at once when that has passed). Returns when the timer must
    -- come: the due time, or the expiry when that is sooner.
    local at = expiry_track(k, id, m)
    if at and at < due then return at end
    return due
  end

  -- snooze: a processing message is put off: pending again, claimable after
  -- delay_ms, no attempt counted (docs/reference.md "Snooze").
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   KEYS[2]  <prefix>:{q}:m:<id>                the message
  --   ARGV[1]  id
  --   ARGV[2]  lease_token                        "" accepts any current lease
  --   ARGV[3]  delay_ms                           integer 0..2592000000 (30 days);
  --                                               0: due now, the next claim takes it
  --   ARGV[4]  "1" (optional)                     the caller forwards timer hints
  -- Lease rules as succeed's. Counted as snoozed; retry_count, last_error and
  -- the retry budget stay; the history gets a {snoozed_at, until} mark.
  -- Returns {"ok", message} (status pending, retry_after the time it is due) |
  -- {"not_found"} | {"invalid_state", status} | {"lease_mismatch"}; with
  -- ARGV[4], {"ok", message, timer}: the hint of the time it is due (need_timer).
  local function snooze(keys, args)
    local base, mkey, id, token = keys[1], keys[2], args[1], args[2] or ''
    local delay = to_int(args[3])
    if delay == nil or delay < 0 or delay > SNOOZE_MAX_MS then return bad_arg('delay_ms') end
    local k = queue_keys(base)
    local m, err = take_leased(k, mkey, id, token)
    if not m then return err end
    local now = now_ms()
    local due = now + delay
    local wake = snooze_message(k, mkey, id, now, due, m)
    flow.freed(k)
    redis.call('HINCRBY', k.stats, 'snoozed', '1')
    local msg = reply_message(id, m, 'pending')
    if args[4] ~= '1' then return { 'ok', msg } end
    return { 'ok', msg, need_timer(k, now, wake) }
  end

  -- fail: a processing message failed; retry with backoff or move to dead.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   KEYS[2]  <prefix>:{q}:m:<id>                the message
  --   ARGV[1]  id
  --   ARGV[2]  lease_token                        "" accepts any current lease
  --   ARGV[3]  error                              string, kept as last_error
  --   ARGV[4]  retryable                          "1" | "0" (0: dead now)
  --   ARGV[5]  retry_after_ms                     integer >= 0 overrides the
  --                                               backoff; -1 uses min(2^n, 3600) s
  --   ARGV[6]  dead_ttl_ms (optional)             given by a caller that forwards
  --                                               timer hints: its retention
  -- Returns {"ok", message} | {"not_found"} | {"invalid_state", status} |
  -- {"lease_mismatch"}; with ARGV[6], {"ok", message, timer}: the hint of the
  -- retry (need_timer), or of the death (death_hint).
  local function fail(keys, args)
    local base, mkey, id, token = keys[1], keys[2], args[1], args[2] or ''
    local err = args[3]
    local retryable = args[4] ~= '0'
    local retry_after_ms = to_int(args[5] or '-1')
    local ttl = to_int(args[6] or '0')
    if err == nil then return bad_arg('error') end
    if retry_after_ms == nil then return bad_arg('retry_after_ms') end
    if ttl == nil then return bad_arg('dead_ttl_ms') end
    local k = queue_keys(base)
    local m, e = load_for(k, mkey, id, 'processing', token)
    if not m then return e end
    local now = now_ms()
    local status, due = fail_message(k, base, id, now, err, retryable, retry_after_ms, m)
    -- Deleted by its expiry (on_expiry "delete"): answered as it was, dead.
    if status == 'deleted' then status = 'dead' end
    local msg = reply_message(id, m, status, status == 'redriving' and flow.dead_letter_queue(k) or now)
    if args[6] == nil then return { 'ok', msg } end
    local timer
    if status == 'pending' then timer = need_timer(k, now, due)
    else timer = death_hint(k, now) end
    return { 'ok', msg, timer }
  end

  -- extend: push a lease's deadline to now + lease_ms.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   KEYS[2]  <prefix>:{q}:m:<id>                the message
  --   ARGV[1]  id
  --   ARGV[2]  lease_token                        "" accepts any current lease
  --   ARGV[3]  lease_ms                           integer >= 1
  --   ARGV[4]  "1" (optional)                     the caller forwards timer hints
  --   ARGV[5]  "default" (optional)               lease_ms is the daemon's default:
  --                                               the policy's lease_seconds wins
  -- Returns {"ok", message} | {"not_found"} | {"invalid_state", status} |
  -- {"lease_mismatch"}; with ARGV[4], {"ok", message, timer}: the hint of the
  -- new deadline (need_timer), so a shortened lease is reclaimed on time.
  local function extend(keys, args)
    local base, mkey, id, token = keys[1], keys[2], args[1], args[2] or ''
    local lease_ms = to_int(args[3])
    if lease_ms == nil or lease_ms < 1 then return bad_arg('lease_ms') end
    local k = queue_keys(base)
    local m, e = load_for(k, mkey, id, 'processing', token)
    if not m then return e end
    local now = now_ms()
    lease_ms = flow.lease_ms(k, lease_ms, args[5] == 'default')
    set_updated(mkey, m, now)
    redis.call('ZADD', k.processing, now + lease_ms, id)
    local msg = reply_message(id, m, 'processing', now + lease_ms)
    if args[4] ~= '1' then return { 'ok', msg } end
    return { 'ok', msg, need_timer(k, now, now + lease_ms) }
  end

  -- replay: a dead message gets a fresh retry budget and is claimed next.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   KEYS[2]  <prefix>:{q}:m:<id>                the message
  --   ARGV[1]  id
  -- Resets retry_count, last_error and retry_after (reference behaviour).
  -- Publishes on the queue's wake channel.
  -- Returns {"ok", message} | {"not_found"} | {"invalid_state", status}.
  local function replay(keys, args)
    local base, mkey, id = keys[1], keys[2], args[1]
    local k = queue_keys(base)
    local m, e = load_for(k, mkey, id, 'dead', '')
    if not m then return e end
    local now = now_ms()
    replay_dead(k, mkey, id, now, m)
    notify(k)
    return { 'ok', reply_message(id, m, 'pending') }
  end

  register('succeed', succeed, nil, 'message')
  register('fail', fail, nil, 'message')
  register('snooze', snooze, nil, 'message')
  register('extend', extend, nil, 'message')
  register('replay', replay, nil, 'message')

  settle.succeed_message, settle.snooze_message = succeed_message, snooze_message
  settle.SNOOZE_MAX_MS = SNOOZE_MAX_MS
end
