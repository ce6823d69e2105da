-- promote and reclaim are tick's first two steps on their own. No daemon
-- calls them: they are for operators at redis-cli (docs/operators.md
-- "Reference") and for the tests and the benchmark.

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

-- tick: the timer's call for one queue: reclaim, promote, then retention.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   ARGV[1]  limit                              integer 1..1000, per kind of work
--   ARGV[2]  dead_ttl_ms                        0 keeps dead letters forever
--   ARGV[3]  succeeded_ttl_ms                   0 keeps succeeded forever
--   ARGV[4]  "1" (optional)                     the caller is a timer round
--                                               that reports to timer_done
--   ARGV[5]  "0" (optional)                     do not sample the time series
--                                               (docs/series.md); else it does,
--                                               and a sample that saw activity
--                                               asks for a tick within a minute
-- Returns {promoted, reclaimed, expired, next_in_ms, ready}: next_in_ms is the
-- time until the queue next needs a tick (next scheduled id, lease deadline
-- or retention expiry; -1: none, the queue is idle); ready is how many ids
-- are claimable now (the long-poll safety net); expired counts dead and
-- succeeded messages removed by retention. Any count equal to limit means
-- more work is waiting: call again at once. With ARGV[4], `empty` follows:
-- 1 when none of the queue's keys is left (it may leave the registry), and
-- the queue's timer promise becomes now + next_in_ms (the caller reports
-- that to the schedule), or is deleted. Publishes on the wake channel when it
-- promoted anything.
local function tick(keys, args)
  local base = keys[1]
  local k = queue_keys(base)
  local limit = to_int(args[1])
  local dead_ttl = to_int(args[2])
  local succeeded_ttl = to_int(args[3])
  if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
  if dead_ttl == nil or succeeded_ttl == nil then return bad_arg('ttl') end
  local now = now_ms()
  -- Reclaim first: an expired lease with a zero backoff becomes due at once.
  local reclaimed = reclaim_expired(k, base, now, limit)
  local promoted = promote_due(k, now, limit)
  if promoted > 0 then notify(k) end
  local expired = expire_finished(k, base, k.dead, now, dead_ttl, limit, 'expired_dead')
    + expire_finished(k, base, k.succeeded, now, succeeded_ttl, limit, 'expired_succeeded')

  local wait = -1
  local function due_at(at)
    if at == nil then return end
    local w = math.max(0, at - now)
    if wait < 0 or w < wait then wait = w end
  end
  due_at(first_score(k.scheduled))
  due_at(first_score(k.processing))
  if dead_ttl > 0 then
    local oldest = first_score(k.dead)
    if oldest then due_at(oldest + dead_ttl) end
  end
  if succeeded_ttl > 0 then
    local oldest = first_score(k.succeeded)
    if oldest then due_at(oldest + succeeded_ttl) end
  end
  -- The time series (05_series.lua); ARGV[5] "0": the caller samples none.
  if args[5] ~= '0' and series_sample(base, k.stats, now) then due_at(now + SERIES_TICK_MS) end
  local ready = redis.call('LLEN', k.due) + redis.call('LLEN', k.ready)
  if args[4] ~= '1' then return { promoted, reclaimed, expired, wait, ready } end
  if wait >= 0 then
    redis.call('SET', k.timer, now + wait, 'PX', wait + TIMER_GRACE_MS)
  else
    redis.call('DEL', k.timer)
  end
  local empty = 0
  if wait < 0 and ready == 0 and
     redis.call('EXISTS', k.due, k.ready, k.scheduled, k.processing, k.dead, k.succeeded,
                k.seq, k.stats, k.errors, k.events) == 0 then
    empty = 1
  end
  return { promoted, reclaimed, expired, wait, ready, empty }
end

register('promote', promote)
register('reclaim', reclaim)
register('tick', tick)

