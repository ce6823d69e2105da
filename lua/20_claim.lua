-- The claim: leasing claimable messages (claim_into, shared with
-- settle_claim), and the claim function. Module `leasing`.
local leasing = {}
do
  local v2_seen, v2_active = common.v2_seen, common.v2_active
  local PROMOTE_IN_CLAIM, bad_arg, budget = common.PROMOTE_IN_CLAIM, common.bad_arg, common.budget
  local int_arg, message_key, need_timer = common.int_arg, common.message_key, common.need_timer
  local notify, now_ms, old_keys = common.notify, common.now_ms, common.old_keys
  local queue_keys, register, to_int = common.queue_keys, common.register, common.to_int
  local leased_reply, load_legacy = record.leased_reply, record.load_legacy
  local load_message, set_lease = record.load_message, record.set_lease
  local priorities_used, to_claim_end = record.priorities_used, record.to_claim_end
  local promote_due = lifecycle.promote_due
  local end_expired, expiry_track = lifecycle.end_expired, lifecycle.expiry_track
  local UNGROUPED = groups.UNGROUPED
  -- A claim visits at most this many groups (docs/fairness.md): its work
  -- stays bounded however many groups are held back.
  local GROUP_VISITS = 200

  -- A claim's state while it leases (claim_into fills it per call): k,
  -- base, now, the count reserved, out, worker, deadline (and its argument
  -- text), got, skipped (ids dropped), reply (the REPLY_BYTES budget, false
  -- for a claim of one), full (the budget ran out), serial (the last lease
  -- serial used, false before the first), expiring (id -> message, of the
  -- leased ones with an expiry, made on first use), limited (the policy
  -- sets a per-group limit), cut (the rotation's visits ran out,
  -- take_rotation). One table, filled
  -- afresh by each call (a claim never runs inside another): a table made
  -- per call cost about 1,000 instructions of every claim.
  -- Every field is there from the start and never set to nil (false
  -- instead): a field added or removed per call made Lua 5.1 rehash the
  -- table (thousands of instructions per claim).
  local CLAIM = { k = false, base = false, now = 0, count = 0, out = false, worker = false,
                  deadline = 0, deadline_arg = false, got = 0, skipped = 0, reply = false,
                  full = false, serial = false, expiring = false, limited = false,
                  cut = false }

  -- The sources a claim pops, by generation: the priority lane (0), the
  -- new generation's due then ready list (1), retryd_v2's (2), a group's
  -- claimable set (3).
  local GEN_LANE, GEN_LISTS, GEN_V2, GEN_GROUP = 0, 1, 2, 3

  -- Leases up to `want` messages, into c. Without g, ungrouped ones: the
  -- priority lane (only on a queue that used priorities: highest priority
  -- first, docs/lifecycle.md "Priority"), then the new generation's due list
  -- (retries and replays, oldest first) then ready (fresh, FIFO), then,
  -- only when they did not fill the count, retryd_v2's: each id taken from
  -- those is lifted (set_lease rewrites its HASH as a record, and it joins
  -- the new processing index). LMPOP pops from the first non-empty list of
  -- the two: one call where an RPOP of each list was two. retryd_v2's lists
  -- only while its data was met here lately (v2_active, 00_common.lua):
  -- otherwise a claim costs nothing for them, and the tick's probe finds
  -- whatever a v2 instance enqueued since. With g, one message of group g
  -- (want is 1), the group the claim's turn just gave, from its set
  -- (docs/fairness.md). Ids whose record is gone, or that are past their
  -- expiry (ended as the tick would have, not delivered), are dropped and
  -- counted in c.skipped. Returns how many it leased.
  -- The lease is written out here, not called: a Lua call per message was
  -- 3% of a claim's instructions.
  local function take(c, want, g)
    local k, base, now = c.k, c.base, c.now
    -- The state the loop changes, in locals while it runs (back in c at the end).
    local got, skipped, full, serial, expiring = c.got, c.skipped, c.full, c.serial, c.expiring
    local reply, count, out, worker = c.reply, c.count, c.out, c.worker or nil
    local before = got
    local stop = before + want
    local due, ready = k.due, k.ready
    local first, last = GEN_GROUP, GEN_GROUP
    if not g then
      local lane = k.known.priorities   -- priorities_used, without its call once known
      if lane == nil then lane = priorities_used(k) end
      first, last = lane and GEN_LANE or GEN_LISTS, GEN_V2
    end
    for gen = first, last do
      if gen == GEN_V2 then
        if full or got >= stop or skipped > 100 or not v2_active(k, now) then break end
        local o = old_keys(k)
        due, ready = o.due, o.ready
      end
      while not full and got < stop and skipped <= 100 do
        local from, ids, scores
        if gen == GEN_GROUP then
          -- The group's next id, its lowest score.
          local row = redis.call('ZPOPMIN', k.group_ids .. g)
          if #row == 0 then
            groups.leave(k, g)   -- nothing claimable: out of the rotation
            break
          end
          redis.call('ZREM', k.grouped, row[1])
          ids, scores = { row[1] }, { row[2] }
        elseif gen == GEN_LANE then
          local rows = redis.call('ZPOPMIN', k.priority, int_arg(stop - got))
          if #rows == 0 then break end
          ids, scores = {}, {}
          for i = 1, #rows, 2 do
            ids[#ids + 1], scores[#scores + 1] = rows[i], rows[i + 1]
          end
        else
          local popped = redis.call('LMPOP', '2', due, ready, 'RIGHT', 'COUNT',
                                    int_arg(stop - got))
          if not popped then break end
          from, ids = popped[1], popped[2]
        end
        if gen == GEN_V2 then v2_seen(k, now) end
        for i = 1, #ids do
          local id = ids[i]
          local mkey = message_key(base, id)
          local m
          if gen == GEN_V2 then m = load_legacy(mkey) else m = load_message(mkey) end
          if m and m.expires_at then
            -- Leased, it leaves the expiring index; past its expiry, it is
            -- ended as the tick would have and not delivered.
            redis.call('ZREM', k.expiring, id)
            if m.expires_at <= now then
              end_expired(k, mkey, id, m, now, 'expired')
              if g then groups.gone_if_empty(k, g) end
              m = nil
            else
              local e = expiring or {}
              expiring = e
              e[id] = m
            end
          end
          if not m then
            skipped = skipped + 1
          elseif reply and not budget.take(reply, m) then
            if m.expires_at then expiry_track(k, id, m) end   -- still pending
            full = true
            -- This one and the rest go back where they were, in their order:
            -- the lane's and the group's with their scores, the lists' at
            -- the claim end.
            if gen == GEN_GROUP then
              groups.unpop(k, g, id, scores[1])
            elseif gen == GEN_LANE then
              local back = {}
              for j = i, #ids do back[#back + 1], back[#back + 2] = scores[j], ids[j] end
              redis.call('ZADD', k.priority, unpack(back))
            else
              local back = {}
              for j = #ids, i, -1 do back[#back + 1] = ids[j] end
              redis.call('RPUSH', from, unpack(back))
            end
            break
          else
            if not serial then
              serial = redis.call('HINCRBY', k.stats, 'claimed', int_arg(count)) - count
            end
            serial = serial + 1
            set_lease(mkey, m, now, serial, worker)
            redis.call('ZADD', k.processing, c.deadline_arg, id)
            out[#out + 1] = leased_reply(id, m, c.deadline)
            got = got + 1
            if g then
              redis.call('HINCRBY', k.gcount, 'i' .. g, 1)   -- its processing count
              if c.limited then flow.group_spent(k, g, now) end
            end
          end
        end
      end
    end
    c.got, c.skipped, c.full, c.serial, c.expiring = got, skipped, full, serial, expiring
    return got - before
  end

  -- Round-robin over the rotation, least recently served first
  -- (docs/fairness.md): each visit takes the next group and puts it last
  -- (LMOVE), then leases one of its messages, or takes the group out of the
  -- rotation (nothing claimable, or a limit holds it back). So a batch takes
  -- one message per group, then goes round again while it has room; at most
  -- GROUP_VISITS visits per call. Ungrouped ids the rotation does not name
  -- (enqueued by an instance of an older release) are still claimed, after
  -- the groups.
  -- The turn (LMOVE) and the group's pop and count are written out, not
  -- called (as the lease is in take).
  local function take_rotation(c)
    local k = c.k
    local limited, rated, waits = flow.group_limits(k)
    c.limited = limited
    if rated or not k.known.held_empty then groups.unhold(k, c.now, rated) end
    if not waits and k.known.waiting_empty ~= true then groups.unwait(k) end
    local rotation = k.rotation
    local visits = 0
    while not c.full and c.got < c.count and c.skipped <= 100 and visits < GROUP_VISITS do
      local g = redis.call('LMOVE', rotation, rotation, 'LEFT', 'RIGHT')
      if not g then break end
      visits = visits + 1
      if g == UNGROUPED then
        -- Nothing taken: out of the rotation when there is nothing, but not
        -- when the claim ran out of room or of ids to drop (more than 100
        -- expired or gone in front): it is served first next time.
        if take(c, 1) == 0 then
          if c.full or c.skipped > 100 then groups.unvisit(k) else groups.leave(k, g) end
        end
      elseif not limited or flow.group_admit(k, g, c.now) then
        take(c, 1, g)
      end
    end
    -- The visits (or the ids it may drop) ran out before the rotation did:
    -- groups further on may have claimable messages (the ones visited were
    -- emptied or held back).
    c.cut = visits >= GROUP_VISITS or c.skipped > 100
    if not c.full and c.got < c.count and c.skipped <= 100 and visits < GROUP_VISITS
       and take(c, c.count - c.got) > 0 then
      groups.join(k, UNGROUPED)
    end
  end

  -- Leases up to `count` claimable messages at `now` and appends each to out
  -- (a flat message with its lease): the lease-and-order logic of claim,
  -- shared with settle_claim. count is 1..100, lease_ms already checked.
  -- Promotes due scheduled ids first (at most 100; when some of them stay
  -- claimable, wakes the waiters), then takes ungrouped messages in the
  -- order of take, or, on a queue that uses groups, the groups'
  -- turns (take_rotation). Ids whose message was deleted while they waited
  -- are dropped, and popping goes on (at most 100 such ids per call). Stops
  -- before the message that would take the messages past REPLY_BYTES
  -- (always at least one): the ones not taken stay pending where they were
  -- (lane and group ids with their scores), so a batch may come back short.
  -- worker: the claim's worker (nil for none), kept in each record while leased.
  -- nonce: the daemon's tag of this call (nil for none): what it leased is
  -- kept under k.claims .. nonce for 15 s, so that the daemon can hand it back
  -- if the answer never reaches it (release_lost, docs/durability.md "A claim
  -- whose answer is lost"); when release_lost already gave the nonce up (the
  -- call ran late), everything leased goes straight back and nothing is
  -- answered.
  -- Returns how many it appended.
  local function claim_into(k, base, now, lease_ms, count, out, worker, nonce)
    local promoted = promote_due(k, now, math.max(count, PROMOTE_IN_CLAIM))
    -- The queue's policy may lease fewer or none (03_policy.lua); a claim held
    -- back wakes nobody: a resume, a settlement or the next token will.
    count = flow.admit(k, now, count)
    if count == 0 then return 0 end
    -- Serials are reserved, `count` in one call, once a message is found;
    -- the ones not used are given back. A claim that finds nothing writes
    -- nothing: no stats hash appears for a queue name that never had a message.
    -- A claim of one takes one message, which always fits the budget.
    local deadline = now + lease_ms
    local deadline_arg = int_arg(deadline)
    local reply = count > 1 and budget.new() or false
    local grouped = k.known.groups
    if grouped == nil then grouped = groups.used(k) end
    local got, serial, expiring, cut = 0, false, false, false
    if grouped then
      local c = CLAIM
      c.k, c.base, c.now, c.count, c.out, c.worker = k, base, now, count, out, worker or false
      c.deadline, c.deadline_arg, c.got, c.skipped = deadline, deadline_arg, 0, 0
      c.reply, c.full, c.serial, c.expiring = reply, false, false, false
      c.limited, c.cut = false, false
      take_rotation(c)
      got, serial, expiring, cut = c.got, c.serial, c.expiring, c.cut
    else
      -- A queue without groups: take's lists, written out here with its
      -- state in locals (through take and its state table, the claim cost
      -- 3.5% more instructions; docs/fairness.md "What it costs").
      local skipped, full = 0, false
      local due, ready = k.due, k.ready
      local lane = k.known.priorities   -- priorities_used, without its call once known
      if lane == nil then lane = priorities_used(k) end
      for gen = lane and GEN_LANE or GEN_LISTS, GEN_V2 do
        if gen == GEN_V2 then
          if full or got >= count or skipped > 100 or not v2_active(k, now) then break end
          local o = old_keys(k)
          due, ready = o.due, o.ready
        end
        while not full and got < count and skipped <= 100 do
          local from, ids, scores
          if gen == GEN_LANE then
            local rows = redis.call('ZPOPMIN', k.priority, int_arg(count - got))
            if #rows == 0 then break end
            ids, scores = {}, {}
            for i = 1, #rows, 2 do
              ids[#ids + 1], scores[#scores + 1] = rows[i], rows[i + 1]
            end
          else
            local popped = redis.call('LMPOP', '2', due, ready, 'RIGHT', 'COUNT',
                                      int_arg(count - got))
            if not popped then break end
            from, ids = popped[1], popped[2]
          end
          if gen == GEN_V2 then v2_seen(k, now) end
          for i = 1, #ids do
            local id = ids[i]
            local mkey = message_key(base, id)
            local m
            if gen == GEN_V2 then m = load_legacy(mkey) else m = load_message(mkey) end
            if m and m.expires_at then
              redis.call('ZREM', k.expiring, id)
              if m.expires_at <= now then
                end_expired(k, mkey, id, m, now, 'expired')
                m = nil
              else
                expiring = expiring or {}
                expiring[id] = m
              end
            end
            if not m then
              skipped = skipped + 1
            elseif reply and not budget.take(reply, m) then
              if m.expires_at then expiry_track(k, id, m) end   -- still pending
              full = true
              local back = {}
              if gen == GEN_LANE then
                for j = i, #ids do back[#back + 1], back[#back + 2] = scores[j], ids[j] end
                redis.call('ZADD', k.priority, unpack(back))
              else
                for j = #ids, i, -1 do back[#back + 1] = ids[j] end
                redis.call('RPUSH', from, unpack(back))
              end
              break
            else
              if not serial then
                serial = redis.call('HINCRBY', k.stats, 'claimed', int_arg(count)) - count
              end
              serial = serial + 1
              set_lease(mkey, m, now, serial, worker)
              redis.call('ZADD', k.processing, deadline_arg, id)
              out[#out + 1] = leased_reply(id, m, deadline)
              got = got + 1
            end
          end
        end
      end
    end

    if serial and got < count then
      redis.call('HINCRBY', k.stats, 'claimed', int_arg(got - count))
    end
    if nonce and got > 0 then
      local first, rec = #out - got, ''
      for i = first + 1, #out do rec = rec .. out[i][1] .. ' ' .. out[i][8] .. ' ' end
      -- 15 s (LOST_CLAIM_KEEP_MS in lost_claims.c is the daemon's side of it).
      if not redis.call('SET', k.claims .. nonce, rec, 'NX', 'PX', '15000') then
        -- Given up by release_lost before this call ran: hand all back, in
        -- order, at the claim end (as release does; the lane for a priority,
        -- a group's set for a grouped one).
        for i = #out, first + 1, -1 do
          local id = out[i][1]
          redis.call('ZREM', k.processing, id)
          local m = expiring and expiring[id]
          local g = grouped and record.group_of(base, id) or nil
          to_claim_end(k, base, id, nil, g)
          if g then groups.left_processing(k, g, flow.group_waits(k)) end
          if m then expiry_track(k, id, m) end
          out[i] = nil
        end
        redis.call('HINCRBY', k.stats, 'released', got)
        notify(k)
        got = 0
      end
    end
    flow.spent(k, now, got)
    -- Nothing leased while groups wait for their rate limit's tokens: the
    -- caller retries when the first returns (a long-poll, on any instance).
    -- Nothing leased because the visits ran out: the caller retries at once
    -- (each claim takes the groups it visited out of the rotation, so the
    -- next goes further; no wake-up would come for what is claimable now).
    if got == 0 and grouped and (k.flow_retry_ms or 0) == 0 then
      if cut then
        k.flow_retry_ms = 1
      else
        local first = redis.call('ZRANGE', k.held, '0', '0', 'WITHSCORES')
        if first[2] then k.flow_retry_ms = math.max(1, tonumber(first[2]) - now) end
      end
    end
    -- Retries this call made due and left behind are claimable now: tell the
    -- waiters, as a tick that promoted them would have.
    if promoted > 0 and got == count and (redis.call('LLEN', k.due) > 0 or
       (priorities_used(k) and redis.call('ZCARD', k.priority) > 0) or
       (grouped and groups.ready_count(k) > 0)) then
      notify(k)
    end
    return got
  end

  -- claim: lease up to `count` messages, due retries before fresh ones.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  lease_ms                           integer 1..43200000
  --   ARGV[2]  count                              integer 1..100 (default 1)
  --   ARGV[3]  "1" (optional)                     the caller forwards timer hints
  --   ARGV[4]  "default" | "request" (optional)   where lease_ms came from: "default"
  --                                               (the daemon's default) lets the
  --                                               policy's lease_seconds override it
  --   ARGV[5]  worker (optional, after ARGV[4])   1-128 bytes naming the claimant, kept
  --                                               with each lease ("" or absent: none)
  --   ARGV[6]  nonce (optional, after ARGV[5])    1-64 bytes, unique per call: the
  --                                               daemon's tag for release_lost ("": none)
  -- Claims as claim_into above: due retries and replays first, then fresh ids
  -- FIFO; at most REPLY_BYTES of messages (always at least one), so a batch
  -- may come back short.
  -- Returns {"ok", message, ...}: zero messages when nothing is claimable. Each
  -- message is leased_reply's positional array (02_record.lua): {id, payload,
  -- retry_count, max_retries, created_at, updated_at, lease_expires_at,
  -- lease_token (unique per claim)}, then its optional fields as name, value
  -- pairs. With
  -- ARGV[3] a timer hint follows the messages: the one of the new leases'
  -- deadline (need_timer), -1 when none was needed. With ARGV[4] (and ARGV[3])
  -- one more value ends the reply: when the rate limit held the claim back, the
  -- ms until its next token is due, else 0 (docs/flow-control.md); 1 when a
  -- claim that took nothing ran out of group visits or dropped more than 100
  -- ids (docs/fairness.md): claim again. A claim that leased nothing then
  -- adds two more (with ARGV[4]): the policy's wait_seconds in ms (-1 when
  -- not set: the caller's default long poll applies) and whether the queue
  -- is known, 1 or 0 (it has a policy, or it ever had a message): so
  -- {"ok", timer, retry_ms, wait_ms, known}. Only then: a claim that leases
  -- pays nothing for them.
  local function claim(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local lease_ms = to_int(args[1])
    local count = to_int(args[2] or '1')
    if lease_ms == nil or lease_ms < 1 or lease_ms > 43200000 then return bad_arg('lease_ms') end
    if count == nil or count < 1 or count > 100 then return bad_arg('count') end
    local worker = args[5]
    if worker == '' then worker = nil end
    if worker and #worker > 128 then return bad_arg('worker') end
    local nonce = args[6]
    if nonce == '' then nonce = nil end
    if nonce and #nonce > 64 then return bad_arg('nonce') end
    local out = { 'ok' }
    local now = now_ms()
    lease_ms = flow.lease_ms(k, lease_ms, args[4] == 'default')
    local got = claim_into(k, base, now, lease_ms, count, out, worker, nonce)
    if args[3] == '1' then
      local timer = -1
      if got > 0 then timer = need_timer(k, now, now + lease_ms) end
      out[#out + 1] = timer
      if args[4] then
        out[#out + 1] = k.flow_retry_ms or 0
        if got == 0 then
          local wait_ms, known = flow.empty_claim(k)
          out[#out + 1] = wait_ms
          out[#out + 1] = known
        end
      end
    end
    return out
  end

  register('claim', claim)

  leasing.claim_into = claim_into
end
