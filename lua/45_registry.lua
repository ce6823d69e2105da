-- The registry and the timer schedule (docs/design.md "Timers and the
-- registry"). These functions take the registry SET as KEYS[1]; every key they
-- touch is in its slot (registry_keys), none is a queue's. A queue's functions
-- answer timer hints; the daemon hands them to `register`, outside the queue's
-- atomic call, and the timer visits only the queues the schedule names.
do
  local MAX_BATCH, bad_arg, now_ms = common.MAX_BATCH, common.bad_arg, common.now_ms
  local register, registry_keys, to_int = common.register, common.registry_keys, common.to_int

  -- register: a queue exists and, with in_ms >= 0, has timer work due within in_ms.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  queue name                         1..255 bytes
  --   ARGV[2]  in_ms                              -1: registration only; else >= 0
  -- Adds the name to the registry and its names index, lowers (or adds) its
  -- schedule entry to now + in_ms, and overtakes a timer round that is ticking
  -- the queue (deletes taken[name]), so that round neither raises its entry nor
  -- removes it from the registry. Returns 1.
  local function register_queue(keys, args)
    local r = registry_keys(keys[1])
    local q, in_ms = args[1], to_int(args[2])
    if q == nil or #q < 1 or #q > 255 then return bad_arg('name') end
    if in_ms == nil or in_ms < -1 then return bad_arg('in_ms') end
    redis.call('SADD', r.set, q)
    redis.call('ZADD', r.names, 'NX', 0, q)
    redis.call('HDEL', r.taken, q)
    if in_ms >= 0 then redis.call('ZADD', r.timers, 'LT', now_ms() + in_ms, q) end
    return 1
  end

  -- The sweep: at most every `every` ms (for every caller together), the next
  -- `batch` names of an SSCAN of the registry are put in the names index and
  -- made due now, so a schedule write that was lost is made good; a new pass
  -- over the registry starts at most every `cycle` ms.
  local function sweep(r, now, batch, every, cycle, st)
    if now < (tonumber(st[2]) or 0) then return end
    local cursor, cycle_at = st[1] or '0', tonumber(st[3]) or now
    if cursor == '0' then cycle_at = now end
    local res = redis.call('SSCAN', r.set, cursor, 'COUNT', batch)
    local names = res[2]
    for i = 1, #names do
      redis.call('ZADD', r.names, 'NX', 0, names[i])
      redis.call('ZADD', r.timers, 'LT', now, names[i])
    end
    if #names > 0 then redis.call('HDEL', r.taken, unpack(names)) end
    local next_at = now + every
    if res[1] == '0' then next_at = math.max(next_at, cycle_at + cycle) end
    redis.call('HSET', r.sweep, 'cursor', res[1], 'next_at', next_at, 'cycle_at', cycle_at)
  end

  -- timer_take: the queues whose timer is due, leased to the caller's round.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  limit                              integer 1..1000 queues
  --   ARGV[2]  lease_ms                           integer >= 1: a taken queue comes
  --                                               due again then if no report came
  --   ARGV[3]  sweep_batch                        integer 0..1000 (0: no sweep)
  --   ARGV[4]  sweep_every_ms                     integer >= 1
  --   ARGV[5]  sweep_cycle_ms                     integer >= 0
  --   ARGV[6]  "0" or "1" (optional)              the caller reads the alert
  --                                               fields below; "1": it runs with
  --                                               --alert-url
  --   ARGV[7]  alert_lease_ms (with ARGV[6] "1")  integer >= 1
  -- Runs the sweep when its time has come, then takes the entries due now
  -- (earliest first): each moves to now + lease_ms and taken[name] becomes this
  -- round's token.
  -- Returns {token, next_in_ms, name...}: token 0 when nothing was due;
  -- next_in_ms until the earliest entry left (-1: none).
  -- With ARGV[6], {token, next_in_ms, fleet_alert_url, n, alert_name x n,
  -- name...}: fleet_alert_url is 1 while an instance with --alert-url took a
  -- round in the last ALERT_MARK_MS (the sweep hash's alert_url_until; every
  -- tick then looks for alerts of queues without their own alert_url, and
  -- hands them over here, timer_done's "a"); the n alert names are the queues
  -- handed over that are due, for an ARGV[6] "1" caller only, each leased to it
  -- for alert_lease_ms (docs/dead-letters.md "Alert webhooks"). An "1" caller
  -- also renews alert_url_until (a write at most every ALERT_MARK_RENEW_MS).
  local function timer_take(keys, args)
    local r = registry_keys(keys[1])
    local limit, lease = to_int(args[1]), to_int(args[2])
    local batch, every, cycle = to_int(args[3]), to_int(args[4]), to_int(args[5])
    if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
    if lease == nil or lease < 1 then return bad_arg('lease_ms') end
    if batch == nil or batch < 0 or batch > MAX_BATCH then return bad_arg('sweep_batch') end
    if every == nil or every < 1 or cycle == nil or cycle < 0 then return bad_arg('sweep') end
    local alerting, alert_lease = args[6], to_int(args[7])
    if alerting ~= nil and alerting ~= '0' and alerting ~= '1' then return bad_arg('alerting') end
    if alerting == '1' and (alert_lease == nil or alert_lease < 1) then
      return bad_arg('alert_lease_ms')
    end
    local now = now_ms()
    -- One read of the sweep hash serves the sweep and the alert mark.
    local st = redis.call('HMGET', r.sweep, 'cursor', 'next_at', 'cycle_at', 'alert_url_until')
    if batch > 0 then sweep(r, now, batch, every, cycle, st) end
    local head = nil
    if alerting then
      local ALERT_MARK_MS, ALERT_MARK_RENEW_MS = 24 * 3600 * 1000, 3600 * 1000
      local until_ms = tonumber(st[4]) or 0
      if alerting == '1' and until_ms < now + ALERT_MARK_MS - ALERT_MARK_RENEW_MS then
        until_ms = now + ALERT_MARK_MS
        redis.call('HSET', r.sweep, 'alert_url_until', until_ms)
      end
      local handed = {}
      if alerting == '1' and until_ms > now then
        handed = redis.call('ZRANGE', r.alerts, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
        if #handed > 0 then
          local scores = {}
          for i = 1, #handed do
            scores[#scores + 1] = now + alert_lease
            scores[#scores + 1] = handed[i]
          end
          redis.call('ZADD', r.alerts, unpack(scores))
        end
      end
      head = { until_ms > now and 1 or 0, #handed }
      for i = 1, #handed do head[#head + 1] = handed[i] end
    end
    local due = redis.call('ZRANGE', r.timers, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
    local token = 0
    if #due > 0 then
      token = redis.call('HINCRBY', r.sweep, 'takes', 1)
      local scores, owners = {}, {}
      for i = 1, #due do
        scores[#scores + 1] = now + lease
        scores[#scores + 1] = due[i]
        owners[#owners + 1] = due[i]
        owners[#owners + 1] = token
      end
      redis.call('ZADD', r.timers, unpack(scores))
      redis.call('HSET', r.taken, unpack(owners))
    end
    local wait = -1
    local first = redis.call('ZRANGE', r.timers, 0, 0, 'WITHSCORES')
    if first[2] then wait = math.max(0, tonumber(first[2]) - now) end
    local out = { token, wait }
    if head then
      for i = 1, #head do out[#out + 1] = head[i] end
    end
    for i = 1, #due do out[#out + 1] = due[i] end
    return out
  end

  -- timer_done: what a round's ticks found.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  token                              from timer_take
  --   ARGV     name, next_in_ms, empty, ...       per queue: next_in_ms -1 (idle)
  --                                               or >= 0; empty "1" or "0",
  --                                               or "a" / "n": not empty, and
  --                                               its tick found alerts for an
  --                                               --alert-url instance / none
  -- For a queue still taken by this token (nobody registered it since the
  -- take): next_in_ms >= 0 sets its entry to now + next_in_ms, -1 removes the
  -- entry, and empty "1" removes the queue from the registry. For any other
  -- queue the entry may only go down (ZADD LT) and the queue stays.
  -- "a" hands the queue to the alerting instances (the alerts ZSET, due now,
  -- given out by timer_take); "n" takes it out of that set, only while the
  -- token holds (a death since the tick registered the queue: its next tick
  -- decides).
  -- Returns how many queues left the registry.
  local function timer_done(keys, args)
    local r = registry_keys(keys[1])
    local token = args[1]
    if token == nil or (#args - 1) % 3 ~= 0 or #args > 1 + 3 * MAX_BATCH then
      return bad_arg('reports')
    end
    for i = 2, #args, 3 do
      if to_int(args[i + 1]) == nil then return bad_arg('next_in_ms') end
    end
    local now = now_ms()
    local removed = 0
    for i = 2, #args, 3 do
      local q, wait, empty = args[i], to_int(args[i + 1]), args[i + 2] == '1'
      local alerts = args[i + 2]
      if alerts == 'a' then redis.call('ZADD', r.alerts, now, q) end
      if redis.call('HGET', r.taken, q) == token then
        redis.call('HDEL', r.taken, q)
        if alerts == 'n' then redis.call('ZREM', r.alerts, q) end
        if empty then
          redis.call('SREM', r.set, q)
          redis.call('ZREM', r.names, q)
          redis.call('ZREM', r.timers, q)
          redis.call('ZREM', r.alerts, q)
          removed = removed + 1
        elseif wait >= 0 then
          redis.call('ZADD', r.timers, now + wait, q)
        else
          redis.call('ZREM', r.timers, q)
        end
      elseif wait >= 0 then
        redis.call('ZADD', r.timers, 'LT', now + wait, q)
      end
    end
    return removed
  end

  -- queues_page: one page of registered queue names, in name (byte) order.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  cursor                             "" first; else the last name of
  --                                               the previous page
  --   ARGV[2]  limit                              integer 1..1000
  -- Returns {total, next_cursor or "", name...}: total is how many names the
  -- index holds. O(log N + limit).
  local function queues_page(keys, args)
    local r = registry_keys(keys[1])
    local cursor, limit = args[1] or '', to_int(args[2])
    if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
    local from = '-'
    if cursor ~= '' then from = '(' .. cursor end
    local names = redis.call('ZRANGE', r.names, from, '+', 'BYLEX', 'LIMIT', 0, limit + 1)
    local next_cursor = ''
    if #names > limit then
      names[#names] = nil
      next_cursor = names[#names]
    end
    local out = { redis.call('ZCARD', r.names), next_cursor }
    for i = 1, #names do out[#out + 1] = names[i] end
    return out
  end

  register('register', register_queue, nil, 'registry')
  register('timer_take', timer_take, nil, 'registry')
  register('timer_done', timer_done, nil, 'registry')
  register('queues_page', queues_page, { 'no-writes' }, 'registry')
  -- dlq_link: record (or clear) a queue's dead-letter queue in the graph of
  -- every queue's, refusing a cycle (docs/lifecycle.md "Cycles"). The daemon
  -- calls it before policy_set writes the field; retryctl does the same.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  queue name                         1..255 bytes
  --   ARGV[2]  target                             its dead_letter_queue, "" for none
  -- Follows the targets from ARGV[2] (at most DLQ_CHAIN_MAX hops); when the
  -- chain comes back to ARGV[1] (or ARGV[2] is ARGV[1]) nothing is written.
  -- Returns {"ok"} | {"cycle", q1, q2, ...} (the chain from the queue back
  -- to it) | {"too_long"} (a chain past DLQ_CHAIN_MAX queues).
  local DLQ_CHAIN_MAX = 100
  local function dlq_link(keys, args)
    local r = registry_keys(keys[1])
    local q, target = args[1], args[2]
    if q == nil or #q < 1 or #q > 255 then return bad_arg('name') end
    if target == nil or #target > 255 then return bad_arg('target') end
    if target == '' then
      redis.call('HDEL', r.dlq, q)
      return { 'ok' }
    end
    local chain, at = { q }, target
    for _ = 1, DLQ_CHAIN_MAX do
      chain[#chain + 1] = at
      if at == q then
        local out = { 'cycle' }
        for i = 1, #chain do out[#out + 1] = chain[i] end
        return out
      end
      at = redis.call('HGET', r.dlq, at)
      if not at then
        redis.call('HSET', r.dlq, q, target)
        return { 'ok' }
      end
    end
    return { 'too_long' }
  end

  register('dlq_link', dlq_link, nil, 'registry')

end
