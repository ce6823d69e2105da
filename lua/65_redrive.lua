-- Redrive to another queue (docs/reference.md "Redrive", docs/dead-letters.md §4): dead letters
-- of a source queue become new pending messages of a target queue, each
-- exactly once. The two queues may be in different slots (different cluster
-- masters), so the caller (src/redrive.c, retryctl) sequences calls that each
-- touch one slot:
--   1. redrive_take   (source) dead -> redriving, with the target recorded;
--                     answers the letters (payload, max_retries)
--   2. redrive_in     (target) the idempotent enqueue, keyed by source + id
--   3. redrive_done   (source) the letters leave: record deleted, counted
--   4. redrive_forget (target) the idempotency keys expire a day later
-- A letter in redriving is touched by nothing else (replay, kill, delete
-- answer invalid_state "redriving"; purge and retention walk only dead),
-- and every redrive_take first answers the letters left in redriving by a
-- cut call, so the next redrive on the queue completes them.
do
  local MAX_BATCH, REPLY_BYTES, bad_arg = common.MAX_BATCH, common.REPLY_BYTES, common.bad_arg
  local message_key, notify, now_ms = common.message_key, common.notify, common.now_ms
  local old_keys, queue_keys, register = common.old_keys, common.queue_keys, common.register
  local to_int = common.to_int
  local load_message, store_message = record.load_message, record.store_message
  local drop_orphan, emit, leave_dead = lifecycle.drop_orphan, lifecycle.emit, lifecycle.leave_dead
  local lift, redrive_target = lifecycle.lift, lifecycle.redrive_target
  local DEAD_LETTER_MARK = lifecycle.DEAD_LETTER_MARK
  local expiry_track, to_ready = lifecycle.expiry_track, record.to_ready
  local int_arg, next_id = common.int_arg, common.next_id
  local walk_dead = operator.walk_dead

  -- Letters answered per take: at most this many, and a reply stops after
  -- REPLY_BYTES of payloads (at least one letter).
  local REDRIVE_BATCH = 100
  -- How long a target keeps its idempotency key once the source is done.
  local REDRIVE_FORGET_MS = 24 * 3600 * 1000

  -- "<target base>:redrive:<source queue>:<source id>" (00_common.lua).
  local redrive_key = common.redrive_key

  -- Mode "move" of redrive_take (a message move task, 67_moves.lua): the
  -- source is an SQS dead-letter queue, whose letters are its pending
  -- messages. Takes up to limit claimable ones, from the claim end of the
  -- priority lane, then due, then ready (a grouped message stays: SQS's
  -- move tasks are for standard queues), none newer than the task's first
  -- call (the cursor holds the queue's last id then), into redriving. Each
  -- goes to target, or with target "" to its origin_queue; one without an
  -- origin stops the task (an error reply naming it, put back first). The
  -- letters get the target's own budget, as a death's move does.
  local function take_pending(k, base, target, args, now, out, answer, bytes)
    local limit = to_int(args[3])
    if limit == nil or limit < 1 or limit > REDRIVE_BATCH then return bad_arg('limit') end
    -- The shard's last id (its seq counts the local part).
    local cutoff = to_int(args[4] ~= '' and args[4]
                          or int_arg(k.id_base + (tonumber(redis.call('GET', k.seq)) or 0)))
    if cutoff == nil then return { 'bad_cursor' } end
    local taken, full = 0, false
    local function take(id)
      local m = load_message(message_key(base, id))
      if not m then return true end   -- an orphan id: dropped
      local to = target ~= '' and target or m.origin_queue
      if not to or to == '' then return false end
      if m.expires_at then redis.call('ZREM', k.expiring, id) end
      redis.call('ZADD', k.redriving, now, id)
      redis.call('HSET', k.redrive_to, id, DEAD_LETTER_MARK .. to)
      answer(id, to, m, true)
      taken = taken + 1
      full = taken >= limit or bytes() >= REPLY_BYTES
      return true
    end
    -- A letter without an origin, put back: the letters taken so far go
    -- on (the next call refuses), else the refusal.
    local function refuse(id)
      if taken > 0 then
        out[2] = int_arg(cutoff)
        return out
      end
      return redis.error_reply('ERR retryd: message ' .. id .. ' has no origin queue to go back '
                               .. 'to; give the task a destination')
    end
    if record.priorities_used(k) then
      local lane = redis.call('ZRANGE', k.priority, 0, limit - 1, 'WITHSCORES')
      for i = 1, #lane, 2 do
        if full then break end
        local id = lane[i]
        if tonumber(id) <= cutoff then
          redis.call('ZREM', k.priority, id)
          if not take(id) then
            redis.call('ZADD', k.priority, lane[i + 1], id)
            return refuse(id)
          end
        end
      end
    end
    for _, list in ipairs({ k.due, k.ready }) do
      while not full do
        local id = redis.call('LINDEX', list, -1)
        if not id or tonumber(id) > cutoff then break end
        redis.call('RPOP', list)
        if not take(id) then
          redis.call('RPUSH', list, id)
          return refuse(id)
        end
      end
    end
    if full then out[2] = int_arg(cutoff) end
    return out
  end

  -- redrive_take: step 1, in the source's slot.
  --   KEYS[1]  <prefix>:{source}                  queue key base
  --   ARGV[1]  target                             target queue name (decoded); "" with
  --                                               mode "left", and with "move": each
  --                                               letter's origin queue
  --   ARGV[2]  mode                               "ids" | "all" | "error" | "left" | "move"
  --   ids:     ARGV[3..] ids (at most 1000)
  --   all:     ARGV[3] limit (1..1000), ARGV[4] cursor ("" first)
  --   error:   as all, and ARGV[5] needle (plain substring of last_error)
  --   move:    ARGV[3] limit (1..100), ARGV[4] cursor ("" first): a message
  --            move task's pending letters (take_pending), not dead ones
  --   left:    only the letters already in redriving (the moves of deaths
  --            to the dead_letter_queue, docs/lifecycle.md); selects nothing
  -- When letters are left in redriving (a cut call, or deaths moving to the
  -- dead_letter_queue), answers up to REDRIVE_BATCH of them, each with its
  -- recorded target, and selects nothing new: {1, "", letter...}. Otherwise
  -- moves the selected dead letters to redriving (the record is kept) and
  -- answers {0, next, letter...}: next is "" when the selection is done, else
  -- for ids the count of ids used (call again with the rest), for all/error
  -- the cursor (replay_many's). A letter is {id, target, max_retries,
  -- payload, priority, history}: max_retries 0 for a death's move (the target
  -- gives its own budget); history "" or the packed history, group,
  -- attributes and first-receive flag (one msgpack map: c, h, d, g, a, f).
  local function redrive_take(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local target, mode = args[1], args[2]
    if target == nil or (target == '' and mode ~= 'left' and mode ~= 'move') then
      return bad_arg('target')
    end
    local now = now_ms()
    local out = { 0, '' }
    local bytes = 0
    local function answer(id, to, m, own_budget)
      -- The group rides in the same packed table (docs/fairness.md): the
      -- moved message keeps it.
      -- So do the SQS face's attributes (a) and whether the source records
      -- a first receive (f): a dead letter reads as the message it was.
      local blob = (m.history or m.group or m.attributes or m.first_receive)
                   and cmsgpack.pack({ c = m.created_at, h = m.history, d = m.history_dropped,
                                       g = m.group, a = m.attributes,
                                       f = m.first_receive and 1 or nil }) or ''
      out[#out + 1] = { tonumber(id), to, own_budget and 0 or m.max_retries, m.payload,
                        m.priority or 0, blob }
      bytes = bytes + #m.payload + #blob
    end
    local left = redis.call('ZRANGE', k.redriving, 0, REDRIVE_BATCH - 1)
    if #left > 0 then
      out[1] = 1
      for i = 1, #left do
        local to = redis.call('HGET', k.redrive_to, left[i])
        local m = load_message(message_key(base, left[i]))
        if to and m then
          local name, own = redrive_target(to)
          answer(left[i], name, m, own)
        else   -- an orphan (its record evicted or deleted by hand)
          redis.call('ZREM', k.redriving, left[i])
          redis.call('HDEL', k.redrive_to, left[i])
          redis.call('HINCRBY', k.stats, 'orphans_removed', 1)
        end
        if bytes >= REPLY_BYTES then break end
      end
      return out
    end
    if mode == 'left' then return out end
    if mode == 'move' then
      return take_pending(k, base, target, args, now, out, answer, function() return bytes end)
    end
    -- Takes one dead letter (its generation's index g, its record m).
    local function take(g, id, m, score)
      local mkey = message_key(base, id)
      if m.legacy then lift(k, mkey, id, m, 'dead', score) end
      leave_dead(k, mkey, id, m.last_error or '')
      redis.call('ZADD', k.redriving, now, id)
      redis.call('HSET', k.redrive_to, id, target)
      answer(id, target, m)
    end
    local taken = 0
    if mode == 'ids' then
      if #args - 2 > MAX_BATCH then return bad_arg('ids') end
      for i = 3, #args do
        local id = args[i]
        local g = k
        local score = redis.call('ZSCORE', k.dead, id)
        if not score then
          g = old_keys(k)
          score = redis.call('ZSCORE', g.dead, id)
        end
        if score then
          local m = load_message(message_key(base, id))
          if m then
            take(g, id, m, score)
            taken = taken + 1
          else
            drop_orphan(g, g.dead, id)
          end
        end
        if (bytes >= REPLY_BYTES or taken >= REDRIVE_BATCH) and i < #args then
          out[2] = tostring(i - 2)
          break
        end
      end
      return out
    end
    if mode ~= 'all' and mode ~= 'error' then return bad_arg('mode') end
    local limit = to_int(args[3])
    if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
    local needle = nil
    if mode == 'error' then needle = args[5] or '' end
    -- replay_many's walk and cursor, old generation first, only letters dead
    -- when the first call ran.
    local cursor = walk_dead(k, base, now, args[4] or '', limit, needle,
      function(g, id, m, score)
        take(g, id, m, score)
        taken = taken + 1
      end,
      function() return bytes >= REPLY_BYTES or taken >= REDRIVE_BATCH end)
    if cursor == nil then return { 'bad_cursor' } end
    out[2] = cursor
    return out
  end

  -- redrive_in: step 2, in the target's slot: the idempotent enqueue.
  --   KEYS[1]  <prefix>:{target}                  queue key base
  --   ARGV[1]  source                             source queue name (decoded)
  --   ARGV[2..] fives: source id, max_retries (-1..1000; 0: the target's policy
  --            max_retries, else 3; -1: unlimited), priority (0..9), history ("" or as
  --            redrive_take answers it), payload (last: retryctl sends it with
  --            redis-cli -x)
  -- Each letter not seen before becomes a new pending message (fresh budget,
  -- no idempotency key, origin {source, source id}, the source's history
  -- kept, its times moved to the new created_at; its group and attributes
  -- kept; first_receive 0 when the source recorded one, so the target's
  -- first claim records its own) and its key
  -- redrive_key -> the new id is kept (no expiry until redrive_forget). A
  -- letter seen before answers the id it got then, and creates nothing.
  -- Publishes on the wake channel when it created any.
  -- Returns {new id, ...} in the order given.
  local LETTER_FIELDS = 5
  local function redrive_in(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local source = args[1]
    if source == nil or source == '' then return bad_arg('source') end
    if (#args - 1) % LETTER_FIELDS ~= 0 or #args - 1 > LETTER_FIELDS * MAX_BATCH then
      return bad_arg('letters')
    end
    local now = now_ms()
    local out, created, full = {}, 0, false
    for i = 2, #args, LETTER_FIELDS do
      local src_id, max_retries, priority = to_int(args[i]), to_int(args[i + 1]), to_int(args[i + 2])
      local blob, payload = args[i + 3], args[i + 4]
      if src_id == nil or src_id < 1 then return bad_arg('id') end
      if max_retries == nil or max_retries < -1 or max_retries > 1000 then
        return bad_arg('max_retries')
      end
      if priority == nil or priority < 0 or priority > 9 then return bad_arg('priority') end
      local key = redrive_key(base, source, src_id)
      local seen = redis.call('GET', key)
      if seen then
        out[#out + 1] = tonumber(seen)
      else
        local id = next_id(k)
        if not id then full = true; break end
        if max_retries == 0 then max_retries = flow.max_retries(k, 3, true) end
        local m = { payload = payload, retry_count = 0, max_retries = max_retries,
                    created_at = now, updated_at = now, lease_at = now, serial = 0,
                    origin_queue = source, origin_id = src_id }
        if blob ~= '' then
          local ok, h = pcall(cmsgpack.unpack, blob)
          if ok and type(h) == 'table' and type(h.g) == 'string' and #h.g >= 1 and #h.g <= 128 then
            m.group = h.g
          end
          if ok and type(h) == 'table' and type(h.a) == 'string' and #h.a >= 1 and #h.a <= 262144 then
            m.attributes = h.a
          end
          -- The source recorded its first receive: so does the target, afresh.
          if ok and type(h) == 'table' and h.f then m.first_receive = 0 end
          if ok and type(h) == 'table' and type(h.h) == 'table' then
            local shift = (tonumber(h.c) or now) - now
            for j = 1, #h.h do
              local e = h.h[j]
              if type(e) == 'table' and type(e[1]) == 'number' then e[1] = e[1] + shift end
            end
            m.history, m.history_dropped = h.h, tonumber(h.d) or 0
          end
        end
        -- A sharded target takes the group only where it may live (the
        -- letter is sent to shard 0; placement.group_here): else the
        -- letter comes without it.
        if m.group and not lifecycle.group_here(k, m.group) then m.group = nil end
        if priority > 0 then m.priority = priority end
        local ttl = flow.message_ttl_ms(k)   -- the target's expiry, as its enqueue's
        if ttl then m.expires_at = now + ttl end
        store_message(message_key(base, id), m)
        to_ready(k, int_arg(id), priority, m.group)   -- the lane for a priority above 0
        expiry_track(k, int_arg(id), m)
        redis.call('SET', key, int_arg(id))
        created = created + 1
        out[#out + 1] = id
      end
    end
    if created > 0 then
      redis.call('HINCRBY', k.stats, 'enqueued', created)
      redis.call('HINCRBY', k.stats, 'redriven_in', created)
      notify(k)
    end
    -- The shard has no id left (docs/sharding.md "Ids"): what was made stays
    -- made, and a retry finds it by its key.
    if full then return redis.error_reply('ERR retryd: shard full') end
    return out
  end

  -- redrive_done: step 3, in the source's slot: the letters leave.
  --   KEYS[1]  <prefix>:{source}                  queue key base
  --   ARGV[1..] pairs: source id, the id redrive_in answered for it
  -- A letter still in redriving is deleted (its record too), counted as
  -- redriven and announced by a "redriven" event; any other id is left alone.
  -- Returns how many left.
  local function redrive_done(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    if #args % 2 ~= 0 or #args > 2 * MAX_BATCH then return bad_arg('ids') end
    local now = now_ms()
    local done = 0
    for i = 1, #args, 2 do
      local id = args[i]
      if redis.call('ZREM', k.redriving, id) == 1 then
        redis.call('HDEL', k.redrive_to, id)
        redis.call('UNLINK', message_key(base, id))
        emit(k, 'redriven', id, nil, 0, now)
        done = done + 1
      end
    end
    if done > 0 then redis.call('HINCRBY', k.stats, 'redriven', done) end
    return done
  end

  -- redrive_forget: step 4, in the target's slot: once the source is done, a
  -- letter's idempotency key is kept one more day (a concurrent caller that
  -- took the same letter still gets the same id), then expires.
  --   KEYS[1]  <prefix>:{target}                  queue key base
  --   ARGV[1]  source                             source queue name
  --   ARGV[2..] source ids
  -- Returns how many keys were found.
  local function redrive_forget(keys, args)
    local base = keys[1]
    local source = args[1]
    if source == nil or source == '' or #args - 1 > MAX_BATCH then return bad_arg('source') end
    local n = 0
    for i = 2, #args do
      n = n + redis.call('PEXPIRE', redrive_key(base, source, args[i]), REDRIVE_FORGET_MS)
    end
    return n
  end

  register('redrive_take', redrive_take)
  register('redrive_in', redrive_in)
  register('redrive_done', redrive_done)
  register('redrive_forget', redrive_forget)

  -- redrive_payload: the payload of a letter in redriving, after a "P" (so an
  -- empty payload is told from none), or nil when the letter is not redriving.
  -- For retryctl, which moves payloads byte for byte with redis-cli --raw and
  -- -x instead of through shell variables.
  --   KEYS[1]  <prefix>:{source}                  queue key base
  --   KEYS[2]  <prefix>:{source}:m:<id>           the letter
  --   ARGV[1]  id
  local function redrive_payload(keys, args)
    local k = queue_keys(keys[1])
    if not redis.call('ZSCORE', k.redriving, args[1]) then return nil end
    local m = load_message(keys[2])
    return m and ('P' .. m.payload)
  end

  register('redrive_payload', redrive_payload, { 'no-writes' }, 'message')
end
