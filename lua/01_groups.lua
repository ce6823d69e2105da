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

  -- join, below: marking the queue puts the ungrouped member in the rotation.
  local join

  -- The first grouped message of the queue: from now on claims go through the
  -- rotation, so ungrouped messages already claimable join it as its first
  -- member (else they would wait until every group is empty, or until the
  -- next ungrouped enqueue). Once per queue: HSET adds the field once.
  local function mark(k)
    if k.known.groups == true then return end
    if redis.call('HSET', k.stats, 'groups_used', '1') == 1
       and redis.call('EXISTS', k.due, k.ready, k.priority) > 0 then
      join(k, UNGROUPED)
    end
    k.known.groups = true
  end

  -- The rotation is a LIST of group names, least recently served at the
  -- left: a claim's LMOVE left to right takes the next group and puts it
  -- last in one command. The SET k.rotating holds the same names, so a
  -- group is never in the LIST twice. A group joins at the right end, as if
  -- served just now: after every group that has waited since (a stream of
  -- new groups cannot starve a group with a backlog). Returns true when it
  -- joined.
  function join(k, g)
    if redis.call('SADD', k.rotating, g) == 0 then return false end
    redis.call('RPUSH', k.rotation, g)
    if k.known.waiting_empty == false then redis.call('SREM', k.waiting, g) end
    return true
  end
  groups.join = join

  -- The group the claim's turn just gave goes back to the front, not served (the
  -- claim ran out of room).
  function groups.unvisit(k)
    redis.call('LMOVE', k.rotation, k.rotation, 'RIGHT', 'LEFT')
  end

  -- The group the claim's turn just gave (the last of the LIST) leaves the
  -- rotation: it has nothing claimable (groups.leave), or a limit holds it
  -- back (groups.hold).
  local function leave_last(k, g)
    redis.call('RPOP', k.rotation)
    redis.call('SREM', k.rotating, g)
  end

  -- An ungrouped id became claimable on a queue that uses groups: its member
  -- of the rotation joins (a queue without groups spends nothing here).
  function groups.ungrouped_claimable(k)
    local used = k.known.groups
    if used == nil then used = groups.used(k) end
    if used then join(k, UNGROUPED) end
  end

  -- Group g has no message left (no claimable id, none processing, none
  -- scheduled): it leaves the paged names, and the shard's strays after a
  -- raise (docs/sharding.md "When the raise settles"; whether the shard has
  -- strays is looked at once per Lua state, shard_scan says when it makes
  -- some). Its other keys are gone already.
  local function gone_if_empty(k, g)
    if redis.call('EXISTS', k.group_ids .. g) == 1 then return end
    local c = redis.call('HMGET', k.gcount, 'i' .. g, 's' .. g)
    if (c[1] and c[1] ~= '0') or c[2] then return end
    redis.call('HDEL', k.gcount, 'i' .. g)
    redis.call('ZREM', k.group_names, g)
    local strays = k.known.strays
    if strays == nil then
      strays = redis.call('EXISTS', k.strays) == 1
      k.known.strays = strays
    end
    if strays then redis.call('SREM', k.strays, g) end
  end
  groups.gone_if_empty = gone_if_empty

  -- A group's counts (gcount): i<g>, its processing messages, made (at 0)
  -- when the group gets its first message and kept until it has none, so
  -- a claim's HINCRBY never creates a field (creating one cost a claim
  -- twice the instructions of the HINCRBY); s<g>, its scheduled ones
  -- (pending, not claimable yet), deleted at 0.

  -- Group g is new to the paged names: its processing count starts at 0.
  local function named(k, g)
    if redis.call('ZADD', k.group_names, 'NX', '0', g) == 1 then
      redis.call('HSET', k.gcount, 'i' .. g, '0')
    end
  end

  -- The scheduled count of group g changes by n; at 0 it is deleted.
  -- Returns true when it reached 0.
  local function count_scheduled(k, g, n)
    local field = 's' .. g
    if redis.call('HINCRBY', k.gcount, field, n) > 0 then return false end
    redis.call('HDEL', k.gcount, field)
    return true
  end

  -- Id (of group g) is claimable: into the group's set with the priority
  -- lane's score (record.lane_score), and the group into the rotation.
  function groups.claimable(k, g, id, score)
    mark(k)
    if redis.call('ZADD', k.group_ids .. g, int_arg(score), id) == 1 then
      redis.call('ZADD', k.grouped, id, id)
      named(k, g)
    end
    join(k, g)
  end

  -- A message of group g enters (n = 1) or leaves (n = -1) the scheduled
  -- index: a delayed enqueue, a retry, a snooze; its promotion (after it
  -- joined its set), an expiry, a kill or delete of a scheduled one. When
  -- none of the group is scheduled any more and it has a claimable id, the
  -- group joins the rotation: fifo_groups held it out while one waited
  -- (flow.group_admit), and only a promotion would have put it back.
  function groups.scheduled(k, g, n)
    if n > 0 then
      mark(k)
      named(k, g)
    end
    if not count_scheduled(k, g, n) then return end
    -- Its last scheduled message left: a group that strict order held out
    -- of the rotation may go on (or, with nothing left, it is gone).
    if redis.call('EXISTS', k.group_ids .. g) == 0 then return gone_if_empty(k, g) end
    if join(k, g) then notify(k) end
  end

  -- Id (of group g) leaves the group's claimable set, if it is there (an
  -- expiry, a kill, a delete). A group whose set empties stays in the
  -- rotation until a claim meets it there and takes it out. Returns true
  -- when it was there.
  function groups.unclaimable(k, g, id)
    if redis.call('ZREM', k.group_ids .. g, id) == 0 then return false end
    redis.call('ZREM', k.grouped, id)
    gone_if_empty(k, g)
    return true
  end

  -- A leased message of group g left processing (the caller puts it where
  -- it goes next). Its place is free: a group the cap or strict order held
  -- out of the rotation joins it again when it has a claimable id, and the
  -- waiters are told (on any instance: the wake channel).
  -- waits: whether the policy has group_max_in_flight or fifo_groups
  -- (flow.group_waits). Without them a group with a claimable id is in the
  -- rotation already (only an empty one leaves it, or one its rate limit
  -- holds, which the claims put back), so a lease that ends while its group
  -- has more costs the one HINCRBY.
  function groups.left_processing(k, g, waits)
    local left = redis.call('HINCRBY', k.gcount, 'i' .. g, -1)
    if left > 0 and not waits then return end
    local claimable = redis.call('EXISTS', k.group_ids .. g) == 1
    if left <= 0 and not claimable then gone_if_empty(k, g) end
    if waits and claimable and join(k, g) then notify(k) end
  end

  -- An id the claim popped from group g's set goes back, with its score, and its group back to
  -- the front of the rotation (a claim that ran out of room serves it next).
  function groups.unpop(k, g, id, score)
    redis.call('ZADD', k.group_ids .. g, score, id)
    redis.call('ZADD', k.grouped, id, id)
    redis.call('LMOVE', k.rotation, k.rotation, 'RIGHT', 'LEFT')
  end

  -- The groups whose rate-limit token is due again by now go back into the
  -- rotation, at most 100 per call (the rest at the next claim). rated:
  -- whether the policy has a group_rate_limit; without one every held group
  -- is due (the limit was removed), and once none is left this Lua state
  -- knows it (k.known.held_empty, cleared by hold; every writer runs here),
  -- so a queue without a group rate limit spends no command on it.
  function groups.unhold(k, now, rated)
    local known = k.known
    if not rated and known.held_empty then return end
    local due = redis.call('ZRANGE', k.held, '-inf', rated and int_arg(now) or '+inf', 'BYSCORE',
                           'LIMIT', '0', '100')
    if #due == 0 then
      if not rated then known.held_empty = true end
      return
    end
    redis.call('ZREM', k.held, unpack(due))
    for i = 1, #due do join(k, due[i]) end
  end

  -- Group g (the group the claim's turn just gave) is held out of the rotation:
  -- by its rate limit until `until_ms` (then the next claim puts it back),
  -- or, until_ms nil, until one of its leases ends (left_processing puts it
  -- back) or, for the ungrouped member, until an ungrouped id is claimable.
  groups.leave = leave_last

  function groups.hold(k, g, until_ms)
    leave_last(k, g)
    if until_ms then
      redis.call('ZADD', k.held, int_arg(until_ms), g)
      k.known.held_empty = false
    else
      -- Held by the cap or strict order: kept in k.waiting, so that a policy
      -- without them puts it back (unwait) if no lease of it ends first.
      redis.call('SADD', k.waiting, g)
      k.known.waiting_empty = false
    end
  end

  -- The policy has neither group_max_in_flight nor fifo_groups (any more):
  -- groups they held go back into the rotation, at most 100 per claim. Once
  -- none is left this Lua state knows it (k.known.waiting_empty; a fresh
  -- state looks once), so a queue that never held one spends nothing.
  function groups.unwait(k)
    local known = k.known
    if known.waiting_empty then return end
    local names = redis.call('SPOP', k.waiting, '100')
    if #names == 0 then
      known.waiting_empty = true
      return
    end
    known.waiting_empty = false
    for i = 1, #names do join(k, names[i]) end
  end

  -- Group g's processing count, and its count of scheduled messages.
  function groups.busy(k, g)
    local c = redis.call('HMGET', k.gcount, 'i' .. g, 's' .. g)
    return tonumber(c[1]) or 0, tonumber(c[2]) or 0
  end

  -- How many ids all groups' claimable sets hold.
  function groups.ready_count(k)
    return redis.call('ZCARD', k.grouped)
  end

  -- groups: a page of the queue's groups, by name (GET /queues/{q}/groups).
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  cursor                             "" from the start, else the last
  --                                               name of the previous page
  --   ARGV[2]  limit                              integer 1..1000
  --   ARGV[3]  rev                                optional: the caller's view of a
  --                                               sharded queue (placement.read_refusal)
  -- Each group with a pending or processing message once, in name order; a
  -- group that empties between pages is not shown. Work per call: one ZRANGE
  -- BYLEX, one HMGET and a ZCARD per group of the page: pending is the
  -- group's claimable ids and its scheduled ones, processing its leases.
  -- Returns {"ok", next_cursor or "", group, pending, processing, ...} | {"reshard"}.
  local function page(keys, args)
    local k = common.queue_keys(keys[1])
    local cursor, limit = args[1] or '', common.to_int(args[2] or '100')
    if limit == nil or limit < 1 or limit > 1000 then return common.bad_arg('limit') end
    local refused = groups.read_refusal(k, args[3])
    if refused then return refused end
    local from = cursor == '' and '-' or '(' .. cursor
    local names = redis.call('ZRANGE', k.group_names, from, '+', 'BYLEX', 'LIMIT', '0',
                             int_arg(limit + 1))
    local more = #names > limit
    if more then names[#names] = nil end
    local out = { 'ok', more and names[#names] or '' }
    if #names == 0 then return out end
    local fields = {}
    for i = 1, #names do
      fields[#fields + 1] = 'i' .. names[i]
      fields[#fields + 1] = 's' .. names[i]
    end
    local c = redis.call('HMGET', k.gcount, unpack(fields))
    for i = 1, #names do
      local g = names[i]
      out[#out + 1] = g
      out[#out + 1] = redis.call('ZCARD', k.group_ids .. g) + (tonumber(c[2 * i]) or 0)
      out[#out + 1] = tonumber(c[2 * i - 1]) or 0
    end
    return out
  end

  common.register('groups', page, { 'no-writes' })

  groups.UNGROUPED = UNGROUPED
end
