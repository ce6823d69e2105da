-- The timer's functions: tick (one queue's timer work, retryd_v2's drain
-- included), and promote and reclaim, two of its steps on their own.
-- promote and reclaim are tick's first two steps on their own. No daemon
-- calls them: they are for operators at redis-cli (docs/operators.md
-- "Reference") and for the tests and the benchmark.
do
  local OLD_PROBE_MS, v2_seen, v2_active = common.OLD_PROBE_MS, common.v2_seen, common.v2_active
  local MAX_BATCH, TIMER_GRACE_MS, bad_arg = common.MAX_BATCH, common.TIMER_GRACE_MS, common.bad_arg
  local message_key, notify, now_ms = common.message_key, common.notify, common.now_ms
  local old_keys, push_due, queue_keys = common.old_keys, common.push_due, common.queue_keys
  local register, to_int = common.register, common.to_int
  local load_legacy, store_message = record.load_legacy, record.store_message
  local priorities_mark, priorities_used = record.priorities_mark, record.priorities_used
  local expire_finished, fail_message = lifecycle.expire_finished, lifecycle.fail_message
  local promote_due, reclaim_expired = lifecycle.promote_due, lifecycle.reclaim_expired
  local expire_pending = lifecycle.expire_pending
  local alert_work = alerts.alert_work
  local SERIES_TICK_MS, series_sample = timeseries.SERIES_TICK_MS, timeseries.series_sample

  -- promote: move due scheduled ids to the due list (claimed before fresh ids).
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  limit                              integer 1..1000 per call
  -- Returns {moved, next_due_in_ms}: -1 when nothing is scheduled. A caller that
  -- got moved == limit calls again at once. Publishes on the wake channel when
  -- it moved anything.
  local function promote(keys, args)
    local k = queue_keys(keys[1])
    local limit = to_int(args[1])
    if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
    local now = now_ms()
    local moved = promote_due(k, now, limit)
    if moved > 0 then notify(k) end
    local next_due = redis.call('ZRANGE', k.scheduled, 0, 0, 'WITHSCORES')
    local wait = -1
    if next_due[2] then wait = math.max(0, tonumber(next_due[2]) - now) end
    return { moved, wait }
  end

  -- reclaim: fail every expired lease with last_error "lease expired".
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  limit                              integer 1..1000 per call
  -- Returns {reclaimed, next_deadline_in_ms}: -1 when nothing is leased.
  local function reclaim(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local limit = to_int(args[1])
    if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
    local now = now_ms()
    local n = reclaim_expired(k, base, now, limit)
    local next_deadline = redis.call('ZRANGE', k.processing, 0, 0, 'WITHSCORES')
    local wait = -1
    if next_deadline[2] then wait = math.max(0, tonumber(next_deadline[2]) - now) end
    return { n, wait }
  end

  -- The score of the first member of a ZSET, or nil when it is empty.
  local function first_score(key)
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return first[2] and tonumber(first[2])
  end

  -- retryd_v2's indexes, drained by tick while any of them exists (docs/storage.md
  -- "Two generations of indexes"), per call: at most OLD_BATCH ids of each kind
  -- of work (each a failure, a promotion, a deletion or a rewrite of several
  -- commands), and OLD_LIFT due and ready ids (a read and a rewrite each).
  -- With tick's own work at the daemon's batch, a call stays in milliseconds.
  local OLD_BATCH = 100
  local OLD_LIFT = 200
  -- While they exist, the timer comes back at least this often: a retryd_v2
  -- instance may still be enqueuing into them, and hints nothing for that.
  local OLD_REVISIT_MS = 1000
  -- While letters are moving to another queue, the timer comes back this often.
  local MOVE_RECHECK_MS = 1000
  local SETTLE_RECHECK_MS = 1000   -- a raise of shards settling: its round comes this often

  -- Whether this tick drains retryd_v2's indexes: while its data was met in
  -- the queue lately (v2_active), or at the queue's first tick in this Lua
  -- state and then every OLD_PROBE_MS (a v2 instance may have enqueued since),
  -- one EXISTS says whether any of them exists; the answer marks the queue
  -- (v2_seen). Otherwise nothing: no command, no key name built.
  local function v2_probe(k, now)
    local v2 = k.v2
    if not v2_active(k, now) and now < (v2.probe_at or 0) then return false end
    v2.probe_at = now + OLD_PROBE_MS
    local o = old_keys(k)
    if redis.call('EXISTS', o.due, o.ready, o.scheduled, o.processing, o.dead, o.succeeded) == 0 then
      return false
    end
    v2_seen(k, now)
    return true
  end

  -- Whether the queue uses the priority lane. While this Lua state holds
  -- that it never did (record.priorities_used), a tick looks at the lane itself
  -- once every OLD_PROBE_MS (one EXISTS), so a lane written while the state
  -- held something else (its slot migrated away and back, the stats field
  -- lost) is claimed again within a minute of ticks.
  local function lane_probe(k, now)
    if priorities_used(k) then return true end
    local known = k.known
    if now < (known.lane_probe_at or 0) then return false end
    known.lane_probe_at = now + OLD_PROBE_MS
    if redis.call('EXISTS', k.priority) == 0 then return false end
    priorities_mark(k)
    return true
  end

  -- One tick's work on the old generation, every id it moves lifted: expired
  -- leases are failed into the new indexes (lease expired, as reclaim does),
  -- due retries are promoted onto the far end of the new due list, retention
  -- deletes old finished messages and the rest of them are lifted into the new
  -- dead and succeeded sets, and then a batch of the old due and ready ids,
  -- oldest first, goes onto the claim end of the new due list, so they are not
  -- starved behind a backlog of the new generation. Returns the counts
  -- {promoted, reclaimed, expired} and whether a batch was full.
  local function drain_old(k, base, now, dead_ttl, succeeded_ttl)
    local o = old_keys(k)
    local full = false
    local ids = redis.call('ZRANGE', o.processing, '-inf', now, 'BYSCORE', 'LIMIT', 0, OLD_BATCH)
    local reclaimed = 0
    local after = #ids > 0 and flow.expiry_retry_ms(k) or -1   -- lease_expiry, as reclaim
    for i = 1, #ids do
      redis.call('ZREM', o.processing, ids[i])
      local m = load_legacy(message_key(base, ids[i]))
      if m then
        m.lease_expired = true
        fail_message(k, base, ids[i], now, 'lease expired', true, after, m)
        reclaimed = reclaimed + 1
      end
    end
    if reclaimed > 0 then redis.call('HINCRBY', k.stats, 'lease_expired', reclaimed) end
    full = full or #ids == OLD_BATCH

    local function convert(list)
      local kept = {}
      for i = 1, #list do
        local mkey = message_key(base, list[i])
        local m = load_legacy(mkey)
        if m then
          if m.legacy then store_message(mkey, m) end
          kept[#kept + 1] = list[i]
        end
      end
      return kept
    end
    ids = redis.call('ZRANGE', o.scheduled, '-inf', now, 'BYSCORE', 'LIMIT', 0, OLD_BATCH)
    local promoted = 0
    if #ids > 0 then
      redis.call('ZREM', o.scheduled, unpack(ids))
      local kept = convert(ids)
      if #kept > 0 then push_due(k, kept) end
      promoted = #kept
    end
    full = full or #ids == OLD_BATCH

    local expired = expire_finished(o, base, o.dead, now, dead_ttl, OLD_BATCH, 'expired_dead')
      + expire_finished(o, base, o.succeeded, now, succeeded_ttl, OLD_BATCH, 'expired_succeeded')
    full = full or expired >= OLD_BATCH

    -- The finished ones retention keeps are lifted too, with their time, so
    -- the old indexes empty even where dead letters are kept forever. An id
    -- without a record moves as it is (replay_many and purge count it).
    for _, index in ipairs({ 'dead', 'succeeded' }) do
      local rows = redis.call('ZRANGE', o[index], 0, OLD_BATCH - 1, 'WITHSCORES')
      if #rows > 0 then
        local moved, scored = {}, {}
        for i = 1, #rows, 2 do
          local mkey = message_key(base, rows[i])
          local m = load_legacy(mkey)
          if m and m.legacy then store_message(mkey, m) end
          moved[#moved + 1] = rows[i]
          scored[#scored + 1] = rows[i + 1]
          scored[#scored + 1] = rows[i]
        end
        redis.call('ZREM', o[index], unpack(moved))
        redis.call('ZADD', k[index], unpack(scored))
        full = full or #moved == OLD_BATCH
      end
    end

    local taken = redis.call('RPOP', o.due, OLD_LIFT) or {}
    if #taken < OLD_LIFT then
      local more = redis.call('RPOP', o.ready, OLD_LIFT - #taken) or {}
      for i = 1, #more do taken[#taken + 1] = more[i] end
    end
    full = full or #taken == OLD_LIFT
    local kept = convert(taken)
    if #kept > 0 then
      -- The first taken (the oldest) ends up at the claim end: claimed first.
      local back = {}
      for i = #kept, 1, -1 do back[#back + 1] = kept[i] end
      redis.call('RPUSH', k.due, unpack(back))
    end
    return promoted + #kept, reclaimed, expired, full
  end

  -- tick: the timer's call for one queue: reclaim, promote, then retention.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  limit                              integer 1..1000, per kind of work
  --   ARGV[2]  dead_ttl_ms                        0 keeps dead letters forever
  --   ARGV[3]  succeeded_ttl_ms                   0 keeps succeeded forever
  --   ARGV[4]  "1" (optional)                     the caller is a timer round
  --                                               that reports to timer_done
  --   ARGV[5]  alert_recheck_ms (optional, with ARGV[4]) the caller looks for alerts
  --                                               (0: it does not)
  --   ARGV[6]  "0" (optional)                     do not sample the time series
  --                                               (docs/series.md); else it does,
  --                                               and a sample that saw activity
  --                                               asks for a tick within a minute
  --   ARGV[7]  "0" or "1" (optional, with ARGV[5]) "1": some instance runs with
  --                                               --alert-url (timer_take's
  --                                               fleet_alert_url), so a queue
  --                                               without its own alert_url has
  --                                               a destination too; absent: "1"
  -- While any index of retryd_v2 exists, tick also drains it (drain_old), its
  -- counts are in promoted, reclaimed and expired, and the queue is due again
  -- within OLD_REVISIT_MS (at once when a batch was full).
  -- Returns {promoted, reclaimed, expired, next_in_ms, ready}: next_in_ms is the
  -- time until the queue next needs a tick (next scheduled id, lease deadline
  -- or retention expiry; -1: none, the queue is idle); ready is how many ids
  -- are claimable now (the long-poll safety net); expired counts dead and
  -- succeeded messages removed by retention. Any count equal to limit means
  -- more work is waiting: call again at once. With ARGV[4], `empty` follows:
  -- 1 when none of the queue's keys is left (it may leave the registry), and
  -- the queue's timer promise becomes now + next_in_ms (the caller reports
  -- that to the schedule), or is deleted. Publishes on the wake channel when it
  -- promoted anything. `alerts` and `moving` follow `empty` (with ARGV[4]):
  -- moving is how many letters wait in redriving (the caller moves them,
  -- redrive_take mode "left"). `alerts` is -1 without ARGV[5] > 0; with it: when the
  -- queue has an alert destination (its policy's alert_url, or with ARGV[7]
  -- "1" the fleet's --alert-url) and its events stream has alerts not yet
  -- delivered or not yet acknowledged (05_alerts.lua), 2 when the queue has its
  -- own alert_url (any instance delivers them), 1 when not (an --alert-url
  -- instance does); else 0. The queue is then due again within
  -- alert_recheck_ms, so that entries a dead instance left pending are claimed
  -- back. A queue without a destination costs no command for this.
  local function tick(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local limit = to_int(args[1])
    local dead_ttl = to_int(args[2])
    local succeeded_ttl = to_int(args[3])
    if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
    if dead_ttl == nil or succeeded_ttl == nil then return bad_arg('ttl') end
    dead_ttl, succeeded_ttl = flow.retention(k, dead_ttl, succeeded_ttl)
    local now = now_ms()
    -- Reclaim first: an expired lease with a zero backoff becomes due at once.
    local reclaimed = reclaim_expired(k, base, now, limit)
    local lane = lane_probe(k, now)
    -- Expiry before promotion: an expired scheduled id leaves with one ZREM.
    local ended = expire_pending(k, base, now, limit)
    local promoted = promote_due(k, now, limit)
    if promoted > 0 then notify(k) end
    local expired = ended + expire_finished(k, base, k.dead, now, dead_ttl, limit, 'expired_dead')
      + expire_finished(k, base, k.succeeded, now, succeeded_ttl, limit, 'expired_succeeded')
    -- retryd_v2's indexes, while its data was met here lately or when the
    -- probe is due (v2_probe): else nothing is spent on them.
    local old = v2_probe(k, now)
    local o = old and old_keys(k)
    local old_full = false
    if old then
      local p, r, e
      p, r, e, old_full = drain_old(k, base, now, dead_ttl, succeeded_ttl)
      if p > 0 and promoted == 0 then notify(k) end
      promoted, reclaimed, expired = promoted + p, reclaimed + r, expired + e
    end

    local wait = -1
    local function due_at(at)
      if at == nil then return end
      local w = math.max(0, at - now)
      if wait < 0 or w < wait then wait = w end
    end
    local gens = { k }
    if old then
      gens[2] = o
      if old_full then due_at(now) else due_at(now + OLD_REVISIT_MS) end
    end
    local ready = 0
    for i = 1, #gens do
      local g = gens[i]
      due_at(first_score(g.scheduled))
      due_at(first_score(g.processing))
      if g == k then due_at(first_score(k.expiring)) end
      if dead_ttl > 0 then
        local oldest = first_score(g.dead)
        if oldest then due_at(oldest + dead_ttl) end
      end
      if succeeded_ttl > 0 then
        local oldest = first_score(g.succeeded)
        if oldest then due_at(oldest + succeeded_ttl) end
      end
      ready = ready + redis.call('LLEN', g.due) + redis.call('LLEN', g.ready)
    end
    if lane then ready = ready + redis.call('ZCARD', k.priority) end
    if groups.used(k) then ready = ready + groups.ready_count(k) end   -- docs/fairness.md
    -- Letters in redriving (deaths moving to the dead_letter_queue, or a
    -- redrive cut short): the round's instance moves them (docs/lifecycle.md
    -- "Dead-letter queue"), and the queue comes due again until none is left.
    local moving = redis.call('ZCARD', k.redriving)
    if moving > 0 then due_at(now + MOVE_RECHECK_MS) end
    local recheck = args[5] and to_int(args[5])
    if args[5] and (recheck == nil or recheck < 0) then return bad_arg('alert_recheck_ms') end
    if recheck == 0 then recheck = nil end
    local alerts = recheck and 0 or -1   -- -1: not looked for (no ARGV[5] > 0)
    if recheck and args[4] == '1' then
      local own = flow.alert_url(k) ~= nil
      if own or args[7] ~= '0' then
        alerts = alert_work(k, now)
        if alerts == 1 then due_at(now + recheck) end
        if alerts == 1 and own then alerts = 2 end
      end
    end
    -- The time series (05_series.lua); ARGV[6] "0": the caller samples none.
    if args[6] ~= '0' and series_sample(base, k.stats, now) then due_at(now + SERIES_TICK_MS) end
    if args[4] ~= '1' then return { promoted, reclaimed, expired, wait, ready } end
    -- A raise of shards settling (docs/sharding.md "When the raise settles"):
    -- shard 0 is due again within a second, so the round that closes it comes.
    if k.shard == 0 and flow.shard_count(flow.read_policy(k)) > 1 and
       redis.call('HEXISTS', flow.layout_key(k), 'from') == 1 then
      due_at(now + SETTLE_RECHECK_MS)
    end
    if wait >= 0 then
      redis.call('SET', k.timer, now + wait, 'PX', wait + TIMER_GRACE_MS)
      k.timer_at = now + wait
    else
      redis.call('DEL', k.timer)
      k.timer_at = false
    end
    local empty = 0
    o = old_keys(k)   -- a queue leaves the registry only with no v2 index left either
    if wait < 0 and ready == 0 and
       redis.call('EXISTS', k.due, k.ready, k.scheduled, k.processing, k.dead, k.succeeded,
                  k.pushed, k.seq, k.stats, k.errors, k.events, k.policy, o.due, o.ready,
                  o.scheduled, o.processing, o.dead, o.succeeded, k.priority, k.expiring,
                  k.gcount) == 0 then
      empty = 1
    end
    -- A sharded queue says so (docs/sharding.md "Every API over all shards"):
    -- its caller ticks every shard, and learns the layout if it had none.
    local shards = flow.shard_count(flow.read_policy(k))
    if shards > 1 then
      return { promoted, reclaimed, expired, wait, ready, empty, alerts, moving, shards }
    end
    return { promoted, reclaimed, expired, wait, ready, empty, alerts, moving }
  end

  register('promote', promote)
  register('reclaim', reclaim)
  register('tick', tick)
end
