-- An operator's calls: kill, delete, replay_many, purge, stats. Module
-- `operator` (walk_dead, shared with redrive).
local operator = {}
do
  local v2_seen = common.v2_seen
  local MAX_BATCH, REPLY_BYTES, bad_arg = common.MAX_BATCH, common.REPLY_BYTES, common.bad_arg
  local message_key, notify, now_ms = common.message_key, common.notify, common.now_ms
  local old_keys, queue_keys, register = common.old_keys, common.queue_keys, common.register
  local to_int = common.to_int
  local load_message, reply_message = record.load_message, record.reply_message
  local status_of, store_message = record.status_of, record.store_message
  local priorities_used = record.priorities_used
  local drop_orphan = lifecycle.drop_orphan
  local leave_dead, lift, replay_dead = lifecycle.leave_dead, lifecycle.lift, lifecycle.replay_dead
  local bury = lifecycle.bury
  local death_hint = alerts.death_hint
  local zset_page = read.zset_page

  -- Takes a pending id out of the index that holds it: scheduled, the
  -- priority lane (a queue that used priorities: an id of priority 1-9 may
  -- also sit in a list, promoted while this state held otherwise), the due
  -- list, ready (LREM: O(length of the list)); a grouped one, its group's
  -- set (docs/fairness.md), and it leaves the group's pending count. g: its
  -- generation's keys; m: the message.
  local function leave_pending(k, g, id, m)
    if g == k then redis.call('ZREM', k.expiring, id) end
    local group = m and m.group
    if group then
      if redis.call('ZREM', g.scheduled, id) == 1 then groups.scheduled(k, group, -1)
      else groups.unclaimable(k, group, id) end
      return
    end
    if redis.call('ZREM', g.scheduled, id) == 1 then return end
    if g == k and priorities_used(k) and redis.call('ZREM', k.priority, id) == 1 then return end
    if redis.call('LREM', g.due, 1, id) == 0 then redis.call('LREM', g.ready, 1, id) end
  end

  -- kill: mark a pending or processing message dead by hand (an operator's
  -- decision; counts as a death, not as a failure).
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   KEYS[2]  <prefix>:{q}:m:<id>                the message
  --   ARGV[1]  id
  --   ARGV[2]  reason                             kept as last_error ("" -> "killed by operator")
  --   ARGV[3]  dead_ttl_ms (optional)             given by a caller that forwards
  --                                               timer hints: its retention
  -- Returns {"ok", message} | {"not_found"} | {"invalid_state", status}; with
  -- ARGV[3], {"ok", message, timer}: the hint of the dead letter's retention
  -- expiry (need_timer).
  local function kill(keys, args)
    local base, mkey, id = keys[1], keys[2], args[1]
    local reason = args[2] or ''
    local ttl = to_int(args[3] or '0')
    if ttl == nil then return bad_arg('dead_ttl_ms') end
    if reason == '' then reason = 'killed by operator' end
    local k = queue_keys(base)
    local m = load_message(mkey)
    if not m then return { 'not_found' } end
    -- The record's type says which generation's indexes hold the id; the dead
    -- letter is a record in the new ones either way.
    local g = m.legacy and old_keys(k) or k
    if m.legacy then v2_seen(k) end
    local status = status_of(g, id)
    if status == 'pending' then
      leave_pending(k, g, id, m)
    elseif status == 'processing' then
      redis.call('ZREM', g.processing, id)
      if m.group then groups.left_processing(k, m.group, flow.group_waits(k)) end
      flow.freed(k)
    else
      return { 'invalid_state', status }
    end
    local now = now_ms()
    if status ~= 'processing' then m.worker = nil end   -- a released lease's, kept stale
    history.failed(m, now, reason)
    m.last_error, m.updated_at, m.token = reason, now, nil
    local state = bury(k, mkey, id, m, now)
    local msg = reply_message(id, m, state, state == 'dead' and now or flow.dead_letter_queue(k))
    if args[3] == nil then return { 'ok', msg } end
    return { 'ok', msg, death_hint(k, now) }
  end

  -- delete: remove a message for good, in any state but processing.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   KEYS[2]  <prefix>:{q}:m:<id>                the message
  --   ARGV[1]  id
  -- A pending id is taken out of its index (leave_pending; a list's with LREM,
  -- O(length of the list)).
  -- Returns {"ok"} | {"not_found"} | {"invalid_state", "processing"}.
  local function delete(keys, args)
    local base, mkey, id = keys[1], keys[2], args[1]
    local k = queue_keys(base)
    local kind = redis.call('TYPE', mkey)['ok']
    if kind == 'none' then return { 'not_found' } end
    local g = k
    if kind == 'hash' then g = old_keys(k); v2_seen(k) end   -- retryd_v2's: its indexes
    local status = status_of(g, id)
    if status == 'processing' or status == 'redriving' then return { 'invalid_state', status } end
    if status == 'pending' then
      leave_pending(k, g, id, kind == 'string' and load_message(mkey) or nil)
    elseif status == 'dead' then
      leave_dead(g, mkey, id)
    else
      redis.call('ZREM', g.succeeded, id)
    end
    redis.call('DEL', mkey)
    redis.call('HINCRBY', k.stats, 'deleted', 1)
    return { 'ok' }
  end

  -- Walks the dead letters of both generations, for replay_many's and
  -- redrive_take's "all" and "error" modes: retryd_v2's first, then the new
  -- ones (ids only move from the old generation to the new, so none is
  -- skipped), and only letters that were dead when the first call ran (the
  -- cursor "<cutoff>;<generation>;<score>:<id>" carries that time), so a letter
  -- that dies again is not taken twice by one operation. At most `limit` index
  -- entries per call; stops early once REPLY_BYTES of error text was read or
  -- full() says so. Ids whose message is gone are dropped (orphans_removed).
  -- visit(g, id, m, score) acts on each letter whose last_error holds needle
  -- (every letter when needle is nil); g is its generation's keys.
  -- Returns the next cursor ("" when the walk is done), or nil for a bad one.
  local function walk_dead(k, base, now, cursor, limit, needle, visit, full)
    local cutoff, gen, after = now, '2', ''
    if cursor ~= '' then
      local c, g, rest = string.match(cursor, '^(%d+);([23]);(.*)$')
      if not c then return nil end
      cutoff, gen, after = tonumber(c), g, rest
    end
    local scanned, budget = 0, limit
    local function stop() return scanned >= REPLY_BYTES or full() end
    while true do
      local g = k
      if gen == '2' then g = old_keys(k) end
      local ids, scores, c = zset_page(g.dead, after, budget)
      if not ids then return nil end
      budget = budget - #ids
      local stopped = false
      for i = 1, #ids do
        if tonumber(scores[i]) > cutoff then c = ''; break end
        local m = load_message(message_key(base, ids[i]))
        if not m then
          drop_orphan(g, g.dead, ids[i])
        else
          local err = m.last_error or ''
          scanned = scanned + #err
          if needle == nil or string.find(err, needle, 1, true) then
            visit(g, ids[i], m, scores[i])
          end
        end
        if stop() and i < #ids then
          c = scores[i] .. ':' .. ids[i]
          stopped = true
          break
        end
      end
      if c ~= '' then return cutoff .. ';' .. gen .. ';' .. c end
      if gen == '3' then return '' end
      gen, after = '3', ''
      if stopped or budget <= 0 or stop() then return cutoff .. ';3;' end
    end
  end

  -- replay_many: batch replay of dead letters, a bounded batch per call.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  mode                               "ids" | "all" | "error"
  --   ids:     ARGV[2..]  ids (at most 1000)
  --   all:     ARGV[2] limit (1..1000), ARGV[3] cursor ("" first)
  --   error:   ARGV[2] limit (1..1000: dead letters examined), ARGV[3] cursor,
  --            ARGV[4] needle (plain substring of last_error)
  -- "all" and "error" only touch letters that were dead when the first call ran
  -- (the cursor carries that time), so a letter that dies again is not replayed
  -- twice by one operation. They walk the dead index past every letter they
  -- look at (the cursor finds its place after replayed letters left), so each
  -- call makes progress whatever the index holds; a call stops early once it
  -- has read REPLY_BYTES of error text. Ids in the dead index whose message is
  -- gone are dropped and counted (orphans_removed). Publishes on the wake
  -- channel when it replayed any.
  -- Returns {replayed, next_cursor}: call again with next_cursor until it is "".
  local function replay_many(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local mode = args[1]
    local now = now_ms()
    local replayed = 0
    local next_cursor = ''
    local function try(id)
      local mkey = message_key(base, id)
      local g = k
      local score = redis.call('ZSCORE', k.dead, id)
      if not score then
        g = old_keys(k)
        score = redis.call('ZSCORE', g.dead, id)
        if not score then return end
      end
      local m = load_message(mkey)
      if m then
        if m.legacy then lift(k, mkey, id, m, 'dead', score) end
        replay_dead(k, mkey, id, now, m)
        replayed = replayed + 1
      else
        drop_orphan(g, g.dead, id)
      end
    end
    if mode == 'ids' then
      if #args - 1 > MAX_BATCH then return bad_arg('ids') end
      for i = 2, #args do try(args[i]) end
    elseif mode == 'all' or mode == 'error' then
      local limit = to_int(args[2])
      if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
      local needle = nil
      if mode == 'error' then needle = args[4] or '' end
      next_cursor = walk_dead(k, base, now, args[3] or '', limit, needle,
        function(g, id, m, score)
          local mkey = message_key(base, id)
          if m.legacy then lift(k, mkey, id, m, 'dead', score) end
          replay_dead(k, mkey, id, now, m)
          replayed = replayed + 1
        end,
        function() return false end)
      if next_cursor == nil then return { 'bad_cursor' } end
    else
      return bad_arg('mode')
    end
    if replayed > 0 then notify(k) end
    return { replayed, next_cursor }
  end

  -- purge: delete dead letters that died more than older_than_ms ago.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  older_than_ms                      integer >= 0
  --   ARGV[2]  limit                              integer 1..1000
  -- Ids whose message is gone are dropped and counted as orphans_removed.
  -- Returns {purged, more}: more is 1 when another call has work.
  local function purge(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local older = to_int(args[1])
    local limit = to_int(args[2])
    if older == nil or older < 0 then return bad_arg('older_than_ms') end
    if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
    local now = now_ms()
    local purged, seen = 0, 0
    -- The new generation's dead letters, then retryd_v2's, limit in all.
    for gen = 1, 2 do
      local g = k
      if gen == 2 then g = old_keys(k) end
      local ids = redis.call('ZRANGE', g.dead, '-inf', now - older, 'BYSCORE', 'LIMIT', 0,
                             limit - seen)
      seen = seen + #ids
      for i = 1, #ids do
        local mkey = message_key(base, ids[i])
        if redis.call('EXISTS', mkey) == 1 then
          leave_dead(g, mkey, ids[i])
          redis.call('UNLINK', mkey)
          purged = purged + 1
        else
          drop_orphan(g, g.dead, ids[i])
        end
      end
      if seen >= limit then break end
    end
    if purged > 0 then redis.call('HINCRBY', k.stats, 'purged', purged) end
    return { purged, seen >= limit and 1 or 0 }
  end

  -- stats: counts per state, lifetime totals, recent deaths and top errors.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  top                                how many top errors (0..100)
  -- Returns a flat array of name, value: pending, ready, scheduled, processing,
  -- succeeded, dead, dead_last_24h (integers), totals (flat array of the stats
  -- hash), top_errors (flat array error, count, highest first), paused (1
  -- while the queue is paused, else 0), redriving, groups, sqs (1 when the
  -- queue's policy says it was made through the SQS endpoint, else 0).
  local function stats(keys, args)
    local k = queue_keys(keys[1])
    local top = to_int(args[1] or '10')
    if top == nil or top < 0 or top > 100 then return bad_arg('top') end
    local now = now_ms()
    -- Both generations' indexes (retryd_v2's only while any of them exists).
    local gens = { k }
    local o = old_keys(k)
    if redis.call('EXISTS', o.due, o.ready, o.scheduled, o.processing, o.dead, o.succeeded) > 0 then
      gens[2] = o
    end
    local c = { ready = 0, scheduled = 0, processing = 0, succeeded = 0, dead = 0, recent = 0 }
    for i = 1, #gens do
      local g = gens[i]
      c.ready = c.ready + redis.call('LLEN', g.due) + redis.call('LLEN', g.ready)
      c.scheduled = c.scheduled + redis.call('ZCARD', g.scheduled)
      c.processing = c.processing + redis.call('ZCARD', g.processing)
      c.succeeded = c.succeeded + redis.call('ZCARD', g.succeeded)
      c.dead = c.dead + redis.call('ZCARD', g.dead)
      c.recent = c.recent + redis.call('ZCOUNT', g.dead, now - 86400000, '+inf')
    end
    -- The priority lane's ids are ready too (docs/lifecycle.md "Priority"),
    -- and so are those in groups' sets (docs/fairness.md).
    if priorities_used(k) then c.ready = c.ready + redis.call('ZCARD', k.priority) end
    local grouped = groups.used(k)
    if grouped then c.ready = c.ready + groups.ready_count(k) end
    local errors = {}
    if top > 0 then errors = redis.call('ZRANGE', k.errors, '+inf', 1, 'BYSCORE', 'REV', 'LIMIT', 0, top, 'WITHSCORES') end
    return {
      'pending', c.ready + c.scheduled,
      'ready', c.ready,
      'scheduled', c.scheduled,
      'processing', c.processing,
      'succeeded', c.succeeded,
      'dead', c.dead,
      'dead_last_24h', c.recent,
      'totals', redis.call('HGETALL', k.stats),
      'top_errors', errors,
      'paused', redis.call('HGET', k.policy, 'paused') == '1' and 1 or 0,
      'redriving', redis.call('ZCARD', k.redriving),
      'groups', grouped and redis.call('ZCARD', k.group_names) or 0,
      'sqs', redis.call('HGET', k.policy, 'sqs') == 'true' and 1 or 0,
      'shards', tonumber(redis.call('HGET', k.policy, 'shards')) or 1,
    }
  end

  register('kill', kill, nil, 'message')
  register('delete', delete, nil, 'message')
  register('replay_many', replay_many)
  register('purge', purge)
  register('stats', stats, { 'no-writes' })

  operator.walk_dead = walk_dead
end
