-- Emptying a queue in bounded batches: drop_queue (every key of the queue,
-- then its registry entries through queue_forget), purge_all (every message,
-- the queue kept), and the registry's side: queue_forget, dlq_sources
-- (docs/reference.md "Dropping and purging a queue"). No module table: no
-- later file uses these.
do
  local bad_arg, int_arg, message_key = common.bad_arg, common.int_arg, common.message_key
  local old_keys, queue_keys, register = common.old_keys, common.queue_keys, common.register
  local registry_keys, to_int, idempotency_key = common.registry_keys, common.to_int,
                                                 common.idempotency_key
  local redrive_key, REPLY_BYTES, MAX_BATCH = common.redrive_key, common.REPLY_BYTES,
                                              common.MAX_BATCH
  local load_message = record.load_message

  -- One call deletes at most this many records or keys, and reads at most
  -- REPLY_BYTES of records (a few ms; the caller calls again on "more").
  local CLEAR_BATCH = 500

  -- A batch's state: k, base, left (records or keys it may still delete),
  -- bytes (of records read), deleted (records), drop (also the keys a record
  -- names: its idempotency key, a redriven letter's marker).
  local function spend(c, n)
    c.left = c.left - n
    return c.left > 0 and c.bytes < REPLY_BYTES
  end

  -- Deletes the records of ids (strings) in order, until the batch has read
  -- REPLY_BYTES of records (always at least one). Returns how many it took:
  -- the caller removes those from their index, the rest stay for the next call.
  local function delete_records(c, ids)
    local base = c.base
    for i = 1, #ids do
      if c.bytes >= REPLY_BYTES then return i - 1 end
      local id = ids[i]
      local mkey = message_key(base, id)
      if c.drop then
        local m = load_message(mkey)
        if m then
          c.bytes = c.bytes + #m.payload + (m.trailer_bytes or 0)
          if m.idempotency_key then
            local ik = idempotency_key(base, m.idempotency_key)
            if redis.call('GET', ik) == id then redis.call('UNLINK', ik) end
          end
          if m.origin_queue then
            redis.call('UNLINK', redrive_key(base, m.origin_queue, int_arg(m.origin_id)))
          end
        end
      end
      c.deleted = c.deleted + redis.call('UNLINK', mkey)
    end
    return #ids
  end

  -- The ids of a ZSET from its lowest score, their records, then the ids
  -- (also from also, a second index holding them). Returns whether the ZSET
  -- is empty and the batch has room.
  local function clear_zset(c, key, also)
    while true do
      local ids = redis.call('ZRANGE', key, '0', int_arg(c.left - 1))
      if #ids == 0 then return true end
      local n = delete_records(c, ids)
      if n == 0 then return false end   -- the bytes ran out (ranks 0..-1 are all)
      redis.call('ZREMRANGEBYRANK', key, '0', int_arg(n - 1))
      if also then redis.call('ZREM', also, unpack(ids, 1, n)) end
      if not spend(c, n) or n < #ids then return false end
    end
  end

  -- The same for a LIST, from its left end.
  local function clear_list(c, key)
    while true do
      local ids = redis.call('LRANGE', key, '0', int_arg(c.left - 1))
      if #ids == 0 then return true end
      local n = delete_records(c, ids)
      redis.call('LTRIM', key, int_arg(n), '-1')
      if not spend(c, n) or n < #ids then return false end
    end
  end

  -- The fairness groups (docs/fairness.md): each group's claimable ids with
  -- their records, then its keys. Returns whether the batch has room.
  local function clear_groups(c)
    local k = c.k
    while true do
      local g = redis.call('ZRANGE', k.group_names, '0', '0')[1]
      if not g then return true end
      local set = k.group_ids .. g
      if not clear_zset(c, set, k.grouped) then return false end
      redis.call('UNLINK', k.group_bucket .. g)
      redis.call('ZREM', k.group_names, g)
      if not spend(c, 1) then return false end
    end
  end

  -- Every index that holds ids, of both generations: their ids' records go
  -- with them. Returns true when all were empty before the batch ran out.
  local function clear_indexes(c)
    local k = c.k
    if not clear_groups(c) then return false end
    local o = old_keys(k)
    local lists = { k.due, k.ready, o.due, o.ready }
    for i = 1, #lists do
      if not clear_list(c, lists[i]) then return false end
    end
    local sets = { k.priority, k.grouped, k.scheduled, k.processing, k.succeeded, k.dead,
                   k.redriving, k.expiring, o.scheduled, o.processing, o.succeeded, o.dead }
    for i = 1, #sets do
      if not clear_zset(c, sets[i]) then return false end
    end
    return true
  end

  -- The keys of a queue with no message left that go with its messages
  -- (group and redrive bookkeeping, the top errors), small by then.
  local function message_side_keys(k)
    return { k.rotation, k.rotating, k.held, k.waiting, k.gcount, k.group_names,
             k.redrive_to, k.errors, k.strays }
  end

  local function new_batch(base, drop)
    return { k = queue_keys(base), base = base, left = CLEAR_BATCH, bytes = 0, deleted = 0,
             drop = drop }
  end

  -- drop_queue: delete every key of the queue, in bounded batches.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  "" | "unregistered"                "unregistered": the caller has run
  --                                               queue_forget since the last call
  --                                               answered "unregister"
  -- The first call marks the queue (k.dropping) and replaces its policy by a
  -- pause: from then on claims lease nothing and an enqueue with flag "e"
  -- answers not_found. Each call deletes at most CLEAR_BATCH records or keys
  -- (with each record its idempotency key and redrive marker).
  -- Returns {"more", deleted}: call again; {"unregister", deleted}: nothing is
  -- left but the mark and the pause: run queue_forget, then call again with
  -- "unregistered" (a message that came meanwhile is deleted, and the
  -- answer is "unregister" again); {"done", deleted}: the queue's keys are gone (a later
  -- enqueue makes a new queue, id 1). A claim's lost-answer record
  -- (k.claims, 15 s) and an idempotency key whose message retention deleted
  -- earlier expire by themselves.
  local function drop_queue(keys, args)
    local mode = args[1] or ''
    if mode ~= '' and mode ~= 'unregistered' then return bad_arg('mode') end
    local c = new_batch(keys[1], true)
    local k = c.k
    if redis.call('SET', k.dropping, '1', 'NX') then
      redis.call('UNLINK', k.policy, k.bucket)
      redis.call('HSET', k.policy, 'paused', '1')
    end
    if not clear_indexes(c) then return { 'more', c.deleted } end
    local rest = message_side_keys(k)
    for _, key in ipairs({ k.seq, k.stats, k.pushed, k.events, k.timer, k.tags, k.moves,
                           timeseries.series_key(c.base) }) do
      rest[#rest + 1] = key
    end
    -- Its message move tasks (at most 10, 67_moves.lua): a runner finds its
    -- task gone and stops.
    local tasks = redis.call('ZRANGE', k.moves, 0, -1)
    for i = 1, #tasks do rest[#rest + 1] = k.move .. tasks[i] end
    redis.call('UNLINK', unpack(rest))
    -- What this Lua state knows of the queue's features (groups, priorities)
    -- went with its keys: a queue of the same name starts afresh.
    for _, known in ipairs({ k.known, k.v2 }) do
      for key in pairs(known) do known[key] = nil end
    end
    -- Done only when nothing came since the caller's queue_forget: an
    -- enqueue meanwhile may have registered the queue again.
    if mode ~= 'unregistered' or c.deleted > 0 then return { 'unregister', c.deleted } end
    redis.call('UNLINK', k.policy, k.bucket, k.dropping)
    -- The layout stays (its rev grows across a drop and a new queue of the
    -- name, docs/sharding.md), but no change of shards outlives the queue:
    -- a raise settling or a lowering running ends with it.
    redis.call('HDEL', flow.layout_key(k), 'from', 'lowering', 'lowering_at', 'scanned',
               'scan_at', 'scan_rev')
    return { 'done', c.deleted }
  end

  -- purge_all: delete every message of the queue in every state (pending,
  -- scheduled, processing, succeeded, dead, redriving; the priority lane and
  -- the fairness groups too), in bounded batches; the queue, its policy,
  -- tags, counters and registration stay.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  -- Each call deletes at most CLEAR_BATCH records or keys, counted in the
  -- stats' `purged`. A settlement of a purged message answers not_found.
  -- Returns {"more", deleted}: call again; {"done", deleted}: no message was
  -- left when the call ended.
  local function purge_all(keys, args)
    local c = new_batch(keys[1], false)
    local k = c.k
    local done = clear_indexes(c)
    if c.deleted > 0 then redis.call('HINCRBY', k.stats, 'purged', c.deleted) end
    if not done then return { 'more', c.deleted } end
    redis.call('UNLINK', unpack(message_side_keys(k)))
    return { 'done', c.deleted }
  end

  register('drop_queue', drop_queue)
  register('purge_all', purge_all)

  -- queue_forget: take a dropped queue out of the registry and its companions.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  queue name                         1..255 bytes
  -- Removes it from the registry, the names index, the timer schedule, the
  -- timer's takes, the alerts handed over and the dead-letter-queue graph
  -- (its own link; queues whose dead_letter_queue it is keep theirs).
  -- Returns 1 when it was registered, else 0.
  local function queue_forget(keys, args)
    local r = registry_keys(keys[1])
    local q = args[1]
    if q == nil or #q < 1 or #q > 255 then return bad_arg('name') end
    local was = redis.call('SREM', r.set, q)
    redis.call('ZREM', r.names, q)
    redis.call('ZREM', r.timers, q)
    redis.call('ZREM', r.alerts, q)
    redis.call('HDEL', r.taken, q)
    redis.call('HDEL', r.dlq, q)
    return was
  end

  -- dlq_sources: a page of the queues whose dead_letter_queue is this one
  -- (SQS's ListDeadLetterSourceQueues), from the registry's dlq HASH.
  --   KEYS[1]  <prefix>:queues                    the registry SET
  --   ARGV[1]  queue name                         the dead-letter queue, 1..255 bytes
  --   ARGV[2]  cursor                             "0" first; else the last reply's
  --   ARGV[3]  count                              integer 1..1000: links looked at
  --                                               per call (HSCAN's COUNT)
  -- Returns {next_cursor ("0": the walk is over), name...}: a page may be short,
  -- even empty, with a cursor; every link there for the whole walk is answered
  -- once (HSCAN's guarantee; a small HASH may answer one twice).
  local function dlq_sources(keys, args)
    local r = registry_keys(keys[1])
    local q, cursor, count = args[1], args[2], to_int(args[3])
    if q == nil or #q < 1 or #q > 255 then return bad_arg('name') end
    if cursor == nil or not string.find(cursor, '^%d+$') then return bad_arg('cursor') end
    if count == nil or count < 1 or count > MAX_BATCH then return bad_arg('count') end
    local page = redis.call('HSCAN', r.dlq, cursor, 'COUNT', int_arg(count))
    local out, seen = { page[1] }, {}
    local pairs_ = page[2]
    for i = 1, #pairs_, 2 do
      local name = pairs_[i]
      if pairs_[i + 1] == q and not seen[name] then
        seen[name] = true
        out[#out + 1] = name
      end
    end
    return out
  end

  register('queue_forget', queue_forget, nil, 'registry')
  register('dlq_sources', dlq_sources, { 'no-writes' }, 'registry')
end
