-- Message move tasks (docs/sqs.md "Message move tasks"): SQS's
-- StartMessageMoveTask, a redrive of a dead-letter queue's letters that a
-- daemon instance runs batch by batch through the redrive protocol
-- (65_redrive.lua, mode "move": the queue's claimable messages, which is
-- what an SQS dead-letter queue holds). A task's state is a HASH in its source
-- queue's slot, so any instance lists and cancels it; the instance running
-- it (the runner) holds a lease it renews every batch, and the registry's
-- watch list (registry_keys().moves) names the sources whose lease may have
-- run out, so that another instance takes the task over.
-- A task's HASH: status (RUNNING, CANCELLING, COMPLETED, CANCELLED, FAILED),
-- destination ("" : each letter's origin queue), rate (messages per second, 0:
-- unpaced), started (ms), moved, to_move, reason (FAILED's), and while it runs
-- runner and lease_until (ms).
do
  local bad_arg, now_ms, int_arg, to_int = common.bad_arg, common.now_ms, common.int_arg,
                                           common.to_int
  local queue_keys, registry_keys = common.queue_keys, common.registry_keys
  local register, MAX_BATCH = common.register, common.MAX_BATCH

  -- SQS lists a source's 10 most recent tasks; older ones are forgotten.
  local TASKS_KEPT = 10
  local MAX_LEASE_MS = 600000
  local MAX_RATE = 500
  local FIELDS = { 'status', 'destination', 'rate', 'started', 'moved', 'to_move', 'reason' }
  local ENDS = { COMPLETED = true, CANCELLED = true, FAILED = true }

  local function task_key(k, id) return k.move .. id end

  -- The newest task's id and status (nil when the queue never had one).
  local function newest(k)
    local id = redis.call('ZREVRANGE', k.moves, 0, 0)[1]
    if not id then return nil end
    return id, redis.call('HGET', task_key(k, id), 'status')
  end

  local function active(status) return status == 'RUNNING' or status == 'CANCELLING' end

  -- A task as replies carry it, appended to out: id, then FIELDS, every
  -- value a string ("" for none).
  local function add_task(out, k, id)
    local v = redis.call('HMGET', task_key(k, id), unpack(FIELDS))
    out[#out + 1] = id
    for i = 1, #FIELDS do out[#out + 1] = v[i] or '' end
    return out
  end

  local function runner_arg(s) return s and #s >= 1 and #s <= 64 end
  local function lease_arg(s)
    local n = to_int(s)
    return n and n >= 1 and n <= MAX_LEASE_MS and n
  end

  -- move_start: a new task on this source, unless one is active.
  --   KEYS[1]  <prefix>:{source}                  queue key base
  --   ARGV[1]  destination                        queue name, "" : each letter's origin
  --   ARGV[2]  rate                               0..500 messages per second (0: unpaced)
  --   ARGV[3]  runner                             the instance that runs it, 1..64 bytes
  --   ARGV[4]  lease_ms                           1..600000: the runner's lease
  -- Counts the letters to move (the claimable messages), keeps the task and
  -- forgets all but the TASKS_KEPT newest.
  -- Returns {"ok", id, started, to_move} | {"running", id}: the active task.
  local function move_start(keys, args)
    local k = queue_keys(keys[1])
    local dest, rate, runner, lease = args[1], to_int(args[2]), args[3], lease_arg(args[4])
    if dest == nil or #dest > 255 then return bad_arg('destination') end
    if rate == nil or rate < 0 or rate > MAX_RATE then return bad_arg('rate') end
    if not runner_arg(runner) then return bad_arg('runner') end
    if not lease then return bad_arg('lease_ms') end
    local last, status = newest(k)
    if last and active(status) then return { 'running', last } end
    local now = now_ms()
    -- The letters of an SQS dead-letter queue are its claimable messages
    -- (65_redrive.lua take_pending).
    local to_move = redis.call('LLEN', k.ready) + redis.call('LLEN', k.due)
                    + redis.call('ZCARD', k.priority)
    local id = int_arg(redis.call('HINCRBY', k.stats, 'move_tasks', 1))
    redis.call('HSET', task_key(k, id), 'status', 'RUNNING', 'destination', dest,
               'rate', int_arg(rate), 'started', int_arg(now), 'moved', '0',
               'to_move', int_arg(to_move), 'runner', runner, 'lease_until', int_arg(now + lease))
    redis.call('ZADD', k.moves, id, id)   -- ids grow: newest last, even within a ms
    local old = redis.call('ZRANGE', k.moves, 0, -(TASKS_KEPT + 1))
    for i = 1, #old do redis.call('UNLINK', task_key(k, old[i])) end
    if #old > 0 then redis.call('ZREMRANGEBYRANK', k.moves, 0, #old - 1) end
    return { 'ok', id, int_arg(now), int_arg(to_move) }
  end

  -- move_claim: take over the source's active task when its runner's lease
  -- ran out (the runner died or stopped), or hand it back to its own runner.
  --   KEYS[1]  <prefix>:{source}                  queue key base
  --   ARGV[1]  runner                             the instance asking, 1..64 bytes
  --   ARGV[2]  lease_ms                           1..600000: its lease if it takes it
  -- A CANCELLING task whose lease ran out is CANCELLED here (nobody was left
  -- to finish its batch).
  -- Returns {"ok", lease_until, task} (the task now runs for ARGV[1]: id,
  -- status, destination, rate, started, moved, to_move, reason) | {"busy",
  -- lease_until}: another runner holds it | {"none"}: no active task.
  local function move_claim(keys, args)
    local k = queue_keys(keys[1])
    local runner, lease = args[1], lease_arg(args[2])
    if not runner_arg(runner) then return bad_arg('runner') end
    if not lease then return bad_arg('lease_ms') end
    local id, status = newest(k)
    if not (id and active(status)) then return { 'none' } end
    local key = task_key(k, id)
    local holder, until_ = unpack(redis.call('HMGET', key, 'runner', 'lease_until'))
    local now = now_ms()
    if holder ~= runner and (tonumber(until_) or 0) > now then return { 'busy', until_ } end
    if status == 'CANCELLING' then
      redis.call('HSET', key, 'status', 'CANCELLED')
      redis.call('HDEL', key, 'runner', 'lease_until')
      return { 'none' }
    end
    redis.call('HSET', key, 'runner', runner, 'lease_until', int_arg(now + lease))
    return add_task({ 'ok', int_arg(now + lease) }, k, id)
  end

  -- move_report: the runner's word after a batch, or at the end.
  --   KEYS[1]  <prefix>:{source}                  queue key base
  --   ARGV[1]  task id
  --   ARGV[2]  runner                             as move_start / move_claim had it
  --   ARGV[3]  moved                              letters moved since the last report, 0..
  --   ARGV[4]  lease_ms                           1..600000: the lease renewed from now
  --   ARGV[5]  end                                "" (go on) | "release" (the runner
  --                                               stops; any instance may take over now)
  --                                               | COMPLETED | CANCELLED | FAILED
  --   ARGV[6]  reason                             FAILED's reason (at most 256 bytes)
  -- A COMPLETED task that was asked to cancel ends CANCELLED.
  -- Returns {"ok", status}: RUNNING / CANCELLING (the runner stops and ends
  -- it CANCELLED) or the final status | {"lost"}: the task is gone or runs
  -- for another runner (this one stops without a word more).
  local function move_report(keys, args)
    local k = queue_keys(keys[1])
    local id, runner, moved, lease = args[1], args[2], to_int(args[3]), lease_arg(args[4])
    local ending, reason = args[5] or '', args[6] or ''
    if to_int(id) == nil then return bad_arg('id') end
    if not runner_arg(runner) then return bad_arg('runner') end
    if moved == nil or moved < 0 then return bad_arg('moved') end
    if not lease then return bad_arg('lease_ms') end
    if ending ~= '' and ending ~= 'release' and not ENDS[ending] then return bad_arg('end') end
    if #reason > 256 then return bad_arg('reason') end
    local key = task_key(k, id)
    local status, holder = unpack(redis.call('HMGET', key, 'status', 'runner'))
    if not (status and active(status)) or holder ~= runner then return { 'lost' } end
    if moved > 0 then redis.call('HINCRBY', key, 'moved', moved) end
    if ending == '' then
      redis.call('HSET', key, 'lease_until', int_arg(now_ms() + lease))
      return { 'ok', status }
    end
    if ending == 'release' then
      redis.call('HSET', key, 'lease_until', '0')
      return { 'ok', status }
    end
    if status == 'CANCELLING' and ending == 'COMPLETED' then ending = 'CANCELLED' end
    redis.call('HSET', key, 'status', ending)
    if ending == 'FAILED' then redis.call('HSET', key, 'reason', reason) end
    redis.call('HDEL', key, 'runner', 'lease_until')
    return { 'ok', ending }
  end

  -- move_cancel: ask a RUNNING task to stop; its runner ends it CANCELLED
  -- after the batch in hand (at once if it has none: a task whose lease ran
  -- out is CANCELLED by the next move_claim).
  --   KEYS[1]  <prefix>:{source}                  queue key base
  --   ARGV[1]  task id
  -- Returns {"ok", moved} | {"not_found"} | {"invalid_state", status}.
  local function move_cancel(keys, args)
    local k = queue_keys(keys[1])
    if to_int(args[1]) == nil then return bad_arg('id') end
    local key = task_key(k, args[1])
    local status, moved = unpack(redis.call('HMGET', key, 'status', 'moved'))
    if not status then return { 'not_found' } end
    if status ~= 'RUNNING' then return { 'invalid_state', status } end
    redis.call('HSET', key, 'status', 'CANCELLING')
    return { 'ok', moved }
  end

  -- move_list: the source's most recent tasks, newest first.
  --   KEYS[1]  <prefix>:{source}                  queue key base
  --   ARGV[1]  max                                1..10
  -- Returns {id, status, destination, rate, started, moved, to_move, reason,
  -- ...}: 8 strings per task.
  local function move_list(keys, args)
    local k = queue_keys(keys[1])
    local max = to_int(args[1])
    if max == nil or max < 1 or max > TASKS_KEPT then return bad_arg('max') end
    local ids = redis.call('ZREVRANGE', k.moves, 0, max - 1)
    local out = {}
    for i = 1, #ids do add_task(out, k, ids[i]) end
    return out
  end

  -- move_watch: the registry's watch list of sources with an active task.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  source queue name                  1..255 bytes
  --   ARGV[2]  at                                 when (ms) to look at it next; "": drop it
  --   ARGV[3]  expect                             "" | the score move_due answered: act
  --                                               only if it is still the score (a
  --                                               move_start meanwhile set a later one)
  -- Returns {"1"} when it acted, else {"0"} (strings, as every reply here).
  local function move_watch(keys, args)
    local r = registry_keys(keys[1])
    local name, at, expect = args[1], args[2], args[3] or ''
    if name == nil or #name < 1 or #name > 255 then return bad_arg('name') end
    if at == nil or (at ~= '' and to_int(at) == nil) then return bad_arg('at') end
    if expect ~= '' then
      local score = redis.call('ZSCORE', r.moves, name)
      if not score or tonumber(score) ~= tonumber(expect) then return { '0' } end
    end
    if at == '' then return { int_arg(redis.call('ZREM', r.moves, name)) } end
    redis.call('ZADD', r.moves, at, name)
    return { '1' }
  end

  -- move_due: the watched sources due to be looked at.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  count                              1..1000
  -- Returns {name, score, ...}: at most count sources whose time came.
  local function move_due(keys, args)
    local r = registry_keys(keys[1])
    local count = to_int(args[1])
    if count == nil or count < 1 or count > MAX_BATCH then return bad_arg('count') end
    return redis.call('ZRANGEBYSCORE', r.moves, '-inf', int_arg(now_ms()), 'WITHSCORES',
                      'LIMIT', '0', int_arg(count))
  end

  register('move_start', move_start)
  register('move_claim', move_claim)
  register('move_report', move_report)
  register('move_cancel', move_cancel)
  register('move_list', move_list, { 'no-writes' })
  register('move_watch', move_watch, nil, 'registry')
  register('move_due', move_due, { 'no-writes' }, 'registry')
end
