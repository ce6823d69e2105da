-- Fairness groups (docs/fairness.md): a grouped message's claimable set, the
-- rotation of groups a claim serves round-robin, and the per-group counts.
-- Only a queue whose stats have `groups_used` has any of these keys; on any
-- other queue these helpers are not reached (groups.used says false once per
-- Lua state). The limits (group_max_in_flight, group_rate_limit,
-- fifo_groups) are the policy's, in 03_policy.lua. Module `groups`.
local groups = {}
do
  local int_arg, notify = common.int_arg, common.notify

  -- The name of the ungrouped messages' member of the rotation: a group name
  -- is 1-128 bytes, so it is never empty.
  local UNGROUPED = ''

  -- Whether the queue ever had a grouped message: the stats field
  -- `groups_used`, set by the first and never cleared, read once per queue by
  -- this Lua state (as record.priorities_used; every writer runs in this state).
  function groups.used(k)
    local known = k.known
    local used = known.groups
    if used == nil then
      used = redis.call('HGET', k.stats, 'groups_used') == '1'
      known.groups = used
    end
    return used
  end

  local function mark(k)
    if k.known.groups == true then return end
    redis.call('HSET', k.stats, 'groups_used', '1')
    k.known.groups = true
  end

  -- The group joins the rotation unless it is in it: scored with the
  -- queue's lease serial now (the `claimed` counter), as if served just now,
  -- so it comes after every group that has waited since. Returns true when
  -- it joined.
  local function join(k, g)
    if redis.call('ZSCORE', k.rotation, g) then return false end
    local serial = redis.call('HGET', k.stats, 'claimed') or '0'
    redis.call('ZADD', k.rotation, serial, g)
    return true
  end
  groups.join = join

  -- An ungrouped id became claimable on a queue that uses groups: its member
  -- of the rotation joins (a queue without groups spends nothing here).
  function groups.ungrouped_claimable(k)
    local used = k.known.groups
    if used == nil then used = groups.used(k) end
    if used then join(k, UNGROUPED) end
  end

  -- The count `field` (p<g>: pending, i<g>: processing) of group g changes by
  -- n; a count at 0 is deleted, and the group leaves the paged names once
  -- both of its counts are gone (no key or field is left for it).
  local function count(k, prefix, g, n)
    local v = redis.call('HINCRBY', k.gcount, prefix .. g, n)
    if v > 0 then
      if v == n then redis.call('ZADD', k.group_names, 'NX', '0', g) end
      return
    end
    redis.call('HDEL', k.gcount, prefix .. g)
    local other = prefix == 'p' and 'i' or 'p'
    if redis.call('HEXISTS', k.gcount, other .. g) == 0 then
      redis.call('ZREM', k.group_names, g)
    end
  end

  -- Id (of group g) is claimable: into the group's set with the priority
  -- lane's score (record.lane_score), and the group into the rotation.
  function groups.claimable(k, g, id, score)
    if redis.call('ZADD', k.group_ids .. g, int_arg(score), id) == 1 then
      redis.call('ZADD', k.grouped, id, id)
    end
    join(k, g)
  end

  -- Id (of group g) leaves the group's claimable set, if it is there (an
  -- expiry, a kill, a delete, a claim that found it past its expiry); the
  -- group leaves the rotation with its last id. Returns true when it was there.
  function groups.unclaimable(k, g, id)
    local set = k.group_ids .. g
    if redis.call('ZREM', set, id) == 0 then return false end
    redis.call('ZREM', k.grouped, id)
    if redis.call('EXISTS', set) == 0 then
      redis.call('ZREM', k.rotation, g)
      redis.call('ZREM', k.held, g)
    end
    return true
  end

  -- A new message of group g is pending (enqueue, replay, a redrive's).
  function groups.added(k, g)
    mark(k)
    count(k, 'p', g, 1)
  end

  -- A pending message of group g is gone (expiry, kill, delete, a death's move).
  function groups.removed(k, g)
    count(k, 'p', g, -1)
  end

  -- A message of group g was leased.
  function groups.leased(k, g)
    count(k, 'p', g, -1)
    count(k, 'i', g, 1)
  end

  -- A leased message of group g left processing, pending again when
  -- to_pending (a retry, a snooze, a release), else done (succeeded, dead).
  -- Its place is free: a group the cap or strict order held out of the
  -- rotation joins it again when it has a claimable id, and the waiters are
  -- told (on any instance: the wake channel).
  function groups.left_processing(k, g, to_pending)
    count(k, 'i', g, -1)
    if to_pending then count(k, 'p', g, 1) end
    if redis.call('EXISTS', k.group_ids .. g) == 1 and join(k, g) then notify(k) end
  end

  -- Takes the next id of group g: ZPOPMIN of its set. Returns the id and its
  -- score, or nil when the set is empty (the group then leaves the rotation).
  function groups.pop(k, g)
    local row = redis.call('ZPOPMIN', k.group_ids .. g)
    if #row == 0 then
      redis.call('ZREM', k.rotation, g)
      return nil
    end
    redis.call('ZREM', k.grouped, row[1])
    return row[1], row[2]
  end

  -- An id groups.pop took goes back, with its score (a claim that ran out of room).
  function groups.unpop(k, g, id, score)
    redis.call('ZADD', k.group_ids .. g, score, id)
    redis.call('ZADD', k.grouped, id, id)
  end

  -- Group g was just served by the lease with this serial: to the back of
  -- the rotation, or out of it when it has no claimable id left.
  function groups.served(k, g, serial)
    if g ~= UNGROUPED and redis.call('EXISTS', k.group_ids .. g) == 0 then
      redis.call('ZREM', k.rotation, g)
    else
      redis.call('ZADD', k.rotation, 'XX', int_arg(serial), g)
    end
  end

  -- The groups whose rate-limit token is due again by now go back into the
  -- rotation (at most 100 per call; the rest at the next claim).
  function groups.unhold(k, now)
    local due = redis.call('ZRANGE', k.held, '-inf', int_arg(now), 'BYSCORE', 'LIMIT', '0', '100')
    if #due == 0 then return end
    redis.call('ZREM', k.held, unpack(due))
    for i = 1, #due do join(k, due[i]) end
  end

  -- Group g is held out of the rotation: by its rate limit until `until_ms`
  -- (then the next claim puts it back), or, until_ms nil, until one of its
  -- leases ends (left_processing puts it back).
  function groups.hold(k, g, until_ms)
    redis.call('ZREM', k.rotation, g)
    if until_ms then redis.call('ZADD', k.held, int_arg(until_ms), g) end
  end

  -- Group g's counts: pending, processing, and its claimable ids.
  function groups.counts(k, g)
    local c = redis.call('HMGET', k.gcount, 'p' .. g, 'i' .. g)
    return tonumber(c[1]) or 0, tonumber(c[2]) or 0
  end

  -- How many ids all groups' claimable sets hold.
  function groups.ready_count(k)
    return redis.call('ZCARD', k.grouped)
  end

  -- The next group in the rotation after `names` rows: up to n names, least
  -- recently served first.
  function groups.next_names(k, n)
    return redis.call('ZRANGE', k.rotation, '0', int_arg(n - 1))
  end

  -- groups: a page of the queue's groups, by name (GET /queues/{q}/groups).
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  cursor                             "" from the start, else the last
  --                                               name of the previous page
  --   ARGV[2]  limit                              integer 1..1000
  -- Each group with a pending or processing message once, in name order; a
  -- group that empties between pages is not shown. Work per call: one ZRANGE
  -- BYLEX and one HMGET of the page.
  -- Returns {"ok", next_cursor or "", group, pending, processing, ...}.
  local function page(keys, args)
    local k = common.queue_keys(keys[1])
    local cursor, limit = args[1] or '', common.to_int(args[2] or '100')
    if limit == nil or limit < 1 or limit > 1000 then return common.bad_arg('limit') end
    local from = cursor == '' and '-' or '(' .. cursor
    local names = redis.call('ZRANGE', k.group_names, from, '+', 'BYLEX', 'LIMIT', '0',
                             int_arg(limit + 1))
    local more = #names > limit
    if more then names[#names] = nil end
    local out = { 'ok', more and names[#names] or '' }
    if #names == 0 then return out end
    local fields = {}
    for i = 1, #names do
      fields[#fields + 1] = 'p' .. names[i]
      fields[#fields + 1] = 'i' .. names[i]
    end
    local c = redis.call('HMGET', k.gcount, unpack(fields))
    for i = 1, #names do
      out[#out + 1] = names[i]
      out[#out + 1] = tonumber(c[2 * i - 1]) or 0
      out[#out + 1] = tonumber(c[2 * i]) or 0
    end
    return out
  end

  common.register('groups', page, { 'no-writes' })

  groups.UNGROUPED = UNGROUPED
end
