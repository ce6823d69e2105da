-- Reads: get, and the listings (list; their walk is shared with export).
-- Module `read`.
local read = {}
do
  local MAX_BATCH, REPLY_BYTES, bad_arg = common.MAX_BATCH, common.REPLY_BYTES, common.bad_arg
  local budget, message_key, old_keys = common.budget, common.message_key, common.old_keys
  local queue_keys, register, to_int = common.queue_keys, common.register, common.to_int
  local now_ms = common.now_ms
  local load_message, message_reply = record.load_message, record.message_reply
  local reply_message = record.reply_message
  local LANE_BAND, LANE_DUE, priorities_used = record.LANE_BAND, record.LANE_DUE,
                                               record.priorities_used

  -- get: one message.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   KEYS[2]  <prefix>:{q}:m:<id>                the message
  --   ARGV[1]  id
  -- Returns {"ok", message} | {"not_found"}.
  local function get(keys, args)
    local msg = message_reply(queue_keys(keys[1]), keys[2], args[1])
    if not msg then return { 'not_found' } end
    return { 'ok', msg }
  end

  -- Where a page of a ZSET index starts after cursor "score:id" ("" for the
  -- first page): the rank after that member or, if it left the index meanwhile,
  -- the place a binary search among the members of its score finds (Redis
  -- orders ties bytewise). nil for a malformed cursor.
  local function zset_start(key, cursor)
    if cursor == '' then return 0 end
    local s, m = string.match(cursor, '^(%d+):(%d+)$')
    if not s then return nil end
    local rank = redis.call('ZRANK', key, m)
    local score = redis.call('ZSCORE', key, m)
    if rank and tonumber(score) == tonumber(s) then return rank + 1 end
    local lo = redis.call('ZCOUNT', key, '-inf', '(' .. s)
    local hi = redis.call('ZCOUNT', key, '-inf', s)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local member = redis.call('ZRANGE', key, mid, mid)[1]
      if member <= m then lo = mid + 1 else hi = mid end
    end
    return lo
  end

  -- Up to n members of a ZSET from rank start, and their scores as integers.
  local function zset_range(key, start, n)
    local rows = redis.call('ZRANGE', key, start, start + n - 1, 'WITHSCORES')
    local ids, scores = {}, {}
    for i = 1, #rows, 2 do
      ids[#ids + 1] = rows[i]
      scores[#scores + 1] = string.format('%d', tonumber(rows[i + 1]))
    end
    return ids, scores
  end

  -- One page of a ZSET index after cursor "score:id". Returns ids, their
  -- scores and the next cursor ("" at the end); nil for a malformed cursor.
  local function zset_page(key, cursor, limit)
    local start = zset_start(key, cursor)
    if not start then return nil end
    local ids, scores = zset_range(key, start, limit)
    if #ids == limit and start + limit < redis.call('ZCARD', key) then
      return ids, scores, scores[#ids] .. ':' .. ids[#ids]
    end
    return ids, scores, ''
  end

  -- The sections a listing walks. In each, a cursor of the section's own says
  -- where the next page starts, so that an id that stays in the section is
  -- never passed over while workers claim, and the only move between pending
  -- sections (promotion: scheduled -> due, or -> the priority lane) is caught
  -- by a second pass over due (and over the lane):
  --   lane   the priority lane (a ZSET, docs/lifecycle.md "Priority"), first:
  --          "<score>:<id>" (zset_start); nothing on a queue that never used
  --          priorities.
  --   due    "<pushed>:<left>": when the due_pushed counter was <pushed>,
  --          <left> entries, counted from the far end, were still to come.
  --          Promotion and replay push on the far end (push_due counts them),
  --          release on the claim end; claims pop the claim end. So whatever
  --          was still to come is, later, among the first <left> + (due_pushed
  --          now - <pushed>) entries from the far end: never skipped (an entry
  --          removed from the middle may make a page repeat one).
  --   ready  "<id>": the last id listed. enqueue pushes each new, larger id on
  --          the far end, so ids grow from the claim end; the next page starts
  --          at the first id above it, found by binary search (O(log n) LINDEX).
  --   scheduled, processing, succeeded, dead: "<score>:<id>" (zset_start).
  --   later  due again, from its far end: the ids pushed since the first pass
  --          over due ended (the listing's mark: due_pushed then). A scheduled
  --          id promoted before the walk reached it is there.
  --   lanelater  the lane's due ids (class LANE_DUE) whose seq (when they
  --          became due) is at least the lane mark, priority by priority:
  --          "<score>:<id>". The lane mark, taken as the first pass over the
  --          lane starts, is the earlier of now and the first scheduled id's
  --          due time: a promoted id's seq is its due time, at least that of
  --          the first id scheduled when the pass began (or, scheduled later,
  --          at least the time then), so an id promoted into the lane after
  --          the pass began is there.
  -- open(k, rest, mark, lane_mark) gives the section's state (rest nil: from its start),
  -- nil for a malformed cursor; fetch(k, st, n) the next ids, up to n, in
  -- order, and whether the section ends with them; after(st, ids, i) the
  -- cursor just past the i-th id of the last fetch.
  local SECTIONS = {}

  local function due_pushed(k)
    if k.legacy then return tonumber(redis.call('HGET', k.stats, 'due_pushed') or '0') end
    return tonumber(redis.call('GET', k.pushed) or '0')
  end

  local function due_section(fresh_left)
    return {
      open = function(k, rest, mark)
        local pushed = due_pushed(k)
        local len = redis.call('LLEN', k.due)
        if rest == nil then
          return { pushed = pushed, left = math.min(len, fresh_left(pushed, len, mark)) }
        end
        local p, l = string.match(rest, '^(%d+):(%d+)$')
        if not p then return nil end
        local left = tonumber(l) + math.max(0, pushed - tonumber(p))
        return { pushed = pushed, left = math.min(left, len) }
      end,
      fetch = function(k, st, n)
        st.from = st.left
        if st.left <= 0 then return {}, true end
        local first = math.max(0, st.left - n)
        local rows = redis.call('LRANGE', k.due, first, st.left - 1)
        local ids = {}
        for i = #rows, 1, -1 do ids[#ids + 1] = rows[i] end
        st.left = first
        return ids, first == 0
      end,
      after = function(st, ids, i)
        return st.pushed .. ':' .. (st.from - i)
      end,
    }
  end

  SECTIONS.due = due_section(function(pushed, len, mark) return len end)
  SECTIONS.later = due_section(function(pushed, len, mark) return math.max(0, pushed - mark) end)

  SECTIONS.ready = {
    open = function(k, rest)
      if rest == nil then return { last = 0 } end
      if not string.match(rest, '^%d+$') then return nil end
      return { last = tonumber(rest) }
    end,
    fetch = function(k, st, n)
      local len = redis.call('LLEN', k.ready)
      if st.pos == nil then
        local lo, hi = 0, len
        while lo < hi do
          local mid = math.floor((lo + hi) / 2)
          if tonumber(redis.call('LINDEX', k.ready, -(mid + 1))) <= st.last then
            lo = mid + 1
          else
            hi = mid
          end
        end
        st.pos = lo
      end
      if st.pos >= len then return {}, true end
      local rows = redis.call('LRANGE', k.ready, -(st.pos + n), -(st.pos + 1))
      local ids = {}
      for i = #rows, 1, -1 do ids[#ids + 1] = rows[i] end
      st.pos = st.pos + #ids
      return ids, st.pos >= len
    end,
    after = function(st, ids, i)
      return ids[i]
    end,
  }

  local function zset_section(name)
    return {
      open = function(k, rest)
        local start = zset_start(k[name], rest or '')
        if not start then return nil end
        return { start = start }
      end,
      fetch = function(k, st, n)
        local ids, scores = zset_range(k[name], st.start, n)
        st.scores = scores
        st.start = st.start + #ids
        return ids, #ids < n or st.start >= redis.call('ZCARD', k[name])
      end,
      after = function(st, ids, i)
        return st.scores[i] .. ':' .. ids[i]
      end,
    }
  end
  SECTIONS.scheduled = zset_section('scheduled')
  SECTIONS.processing = zset_section('processing')
  SECTIONS.succeeded = zset_section('succeeded')
  SECTIONS.dead = zset_section('dead')
  -- The claimable ids of every group (docs/fairness.md), by id; walked after
  -- scheduled, so an id promoted into a group's set is not skipped.
  SECTIONS.grouped = zset_section('grouped')

  -- The lane's two sections cost no command on a queue that never used
  -- priorities (record.priorities_used).
  local function lane_section(sec)
    return {
      open = function(k, rest, mark, lane_mark)
        if not priorities_used(k) then return { none = true } end
        return sec.open(k, rest, mark, lane_mark)
      end,
      fetch = function(k, st, n)
        if st.none then return {}, true end
        return sec.fetch(k, st, n)
      end,
      after = sec.after,
    }
  end

  -- The lane's bands (score / LANE_BAND: (9 - priority) * 2 + class) of due
  -- ids (class LANE_DUE): even, 0 (priority 9) to LAST_DUE_BAND (priority 1).
  local LAST_DUE_BAND = 16 + LANE_DUE

  -- The ranks [lo, hi) of the due ids of band `band` whose seq is at least from.
  local function band_ranks(k, band, from)
    local lo = redis.call('ZCOUNT', k.priority, '-inf', string.format('(%d', band * LANE_BAND + from))
    local hi = redis.call('ZCOUNT', k.priority, '-inf', string.format('(%d', (band + 1) * LANE_BAND))
    return lo, hi
  end

  SECTIONS.lane = lane_section(zset_section('priority'))
  SECTIONS.lanelater = lane_section({
    open = function(k, rest, mark, lane_mark)
      local st = { from = lane_mark or 0, band = 0, start = 0 }
      if rest == nil then return st end
      local score = string.match(rest, '^(%d+):%d+$')
      if not score then return nil end
      st.start = zset_start(k.priority, rest)
      st.band = math.floor(tonumber(score) / LANE_BAND)
      if st.band % 2 == 1 then st.band = st.band + 1 end
      return st
    end,
    fetch = function(k, st, n)
      -- The first band with an id at or after rank st.start, and its ranks.
      local function seek()
        while st.band <= LAST_DUE_BAND do
          local lo, hi = band_ranks(k, st.band, st.from)
          if math.max(st.start, lo) < hi then return math.max(st.start, lo), hi end
          st.band = st.band + 2
        end
      end
      local first, hi = seek()
      if not first then return {}, true end
      local ids, scores = zset_range(k.priority, first, math.min(n, hi - first))
      st.scores, st.start = scores, first + #ids
      return ids, st.start >= hi and seek() == nil
    end,
    after = function(st, ids, i)
      return st.scores[i] .. ':' .. ids[i]
    end,
  })

  -- How many ids lanelater has still to see from its start (lane mark from).
  local function lanelater_size(k, from)
    if not priorities_used(k) then return 0 end
    local n = 0
    for band = 0, LAST_DUE_BAND, 2 do
      local lo, hi = band_ranks(k, band, from or 0)
      n = n + hi - lo
    end
    return n
  end

  -- The lane mark of a first pass over the lane that starts now (above).
  local function lane_mark_now(k)
    local now = now_ms()
    local first = redis.call('ZRANGE', k.scheduled, 0, 0, 'WITHSCORES')[2]
    if first and tonumber(first) < now then return tonumber(first) end
    return now
  end

  -- The sections of retryd_v2's indexes ("v2due" ...): the same walks over
  -- the old generation's keys (docs/storage.md "Two generations of indexes").
  local OLD_SECTIONS = { v2due = 'due', v2ready = 'ready', v2scheduled = 'scheduled',
                         v2later = 'later', v2processing = 'processing',
                         v2succeeded = 'succeeded', v2dead = 'dead' }

  -- A section's walk, the keys it walks, and its plain name.
  local function section_of(k, name)
    local plain = OLD_SECTIONS[name]
    if plain then return SECTIONS[plain], old_keys(k), plain end
    return SECTIONS[name], k, name
  end

  -- What each listing walks: retryd_v2's sections first, then the new ones. Ids
  -- only ever move from the old generation to the new one (a lift), so an id
  -- that leaves an old section before the walk reaches it is met in a new
  -- section, which the walk opens later: never skipped (at worst listed twice).
  -- Every listing has more than one section, so its cursor is
  -- "<section>:<its cursor>", and between the two passes over due,
  -- "<section>:<mark>:<its cursor>".
  local LISTINGS = {
    [''] = { 'v2due', 'v2ready', 'v2scheduled', 'v2later', 'v2processing', 'v2succeeded',
             'v2dead', 'lane', 'due', 'ready', 'scheduled', 'later', 'lanelater', 'grouped',
             'processing', 'succeeded', 'dead' },
    pending = { 'v2due', 'v2ready', 'v2scheduled', 'v2later', 'lane', 'due', 'ready',
                'scheduled', 'later', 'lanelater', 'grouped' },
    processing = { 'v2processing', 'processing' },
    succeeded = { 'v2succeeded', 'succeeded' },
    dead = { 'v2dead', 'dead' },
  }
  local CARRIES_MARK = { ready = true, scheduled = true, v2ready = true, v2scheduled = true }
  local ENDS_DUE = { due = true, v2due = true }
  -- The sections from the first pass over the lane to the second: their
  -- cursors start with the lane mark, "<lane mark>@<section>:...".
  local LANE_MARKED = { lane = true, due = true, ready = true, scheduled = true, later = true,
                        lanelater = true }

  -- How many ids a section holds now (later, lanelater: that the walk has
  -- still to see).
  local function section_size(k, name, mark, lane_mark)
    local _, g, plain = section_of(k, name)
    if plain == 'later' then
      return math.min(redis.call('LLEN', g.due), math.max(0, due_pushed(g) - (mark or 0)))
    end
    if plain == 'lanelater' then return lanelater_size(k, lane_mark) end
    if plain == 'lane' then
      return priorities_used(k) and redis.call('ZCARD', k.priority) or 0
    end
    if plain == 'due' or plain == 'ready' then return redis.call('LLEN', g[plain]) end
    return redis.call('ZCARD', g[plain])
  end

  -- How many ids the listed states hold now.
  local function listing_total(k, status)
    local total = 0
    local names = LISTINGS[status]
    for i = 1, #names do
      if names[i] ~= 'later' and names[i] ~= 'v2later' and names[i] ~= 'lanelater' then
        total = total + section_size(k, names[i])
      end
    end
    return total
  end

  -- How many ids a filtered listing reads from an index at a time.
  local FILTER_STEP = 100

  -- Walks the listing of `status` from cursor, handing each id in order to
  -- visit(id, section), which answers "take" (on the page), "skip" (looked at, left
  -- out), "last" (the page ends after it) or "full" (the page ends before it;
  -- never for the first id taken). Reads the indexes `step` ids at a time and
  -- looks at most at MAX_BATCH ids per call. Returns the cursor just past the
  -- last id looked at ("" when the listing has ended), nil for a malformed
  -- cursor.
  local function walk(k, status, cursor, step, visit)
    local names = LISTINGS[status]
    local si, rest, mark = 1, nil, nil
    local here = cursor
    local lane_mark
    do
      local lm, c = string.match(cursor, '^(%d+)@(.*)$')
      if lm then lane_mark, cursor = tonumber(lm), c end
    end
    if cursor ~= '' then
      if #names == 1 then
        rest = cursor
      else
        local name, r = string.match(cursor, '^(%w+):(.*)$')
        si = nil
        for i = 1, #names do
          if names[i] == name then si = i end
        end
        if not si then return nil end
        rest = r
        if CARRIES_MARK[name] then
          local m, r2 = string.match(r, '^(%d+):(.*)$')
          if not m then return nil end
          mark, rest = tonumber(m), r2
        end
      end
    end
    local function rest_empty(from)
      for i = from, #names do
        if section_size(k, names[i], mark, lane_mark) > 0 then return false end
      end
      return true
    end
    local examined = 0
    while si <= #names do
      local name = names[si]
      local sec, g = section_of(k, name)
      if name == 'lane' and rest == nil and priorities_used(k) then lane_mark = lane_mark_now(k) end
      local st = sec.open(g, rest, mark, lane_mark)
      if not st then return nil end
      rest = nil
      local ended
      repeat
        local ids
        ids, ended = sec.fetch(g, st, math.min(step, MAX_BATCH - examined))
        if ended and ENDS_DUE[name] then mark = st.pushed end
        for i = 1, #ids do
          local verdict = visit(ids[i], name)
          if verdict == 'full' then return here end
          examined = examined + 1
          here = sec.after(st, ids, i)
          if CARRIES_MARK[name] then here = mark .. ':' .. here end
          if #names > 1 then here = name .. ':' .. here end
          if lane_mark and LANE_MARKED[name] then here = lane_mark .. '@' .. here end
          if verdict == 'last' or examined >= MAX_BATCH then
            if i == #ids and ended and rest_empty(si + 1) then return '' end
            return here
          end
        end
      until ended
      si = si + 1
    end
    return ''
  end

  -- The state of an id met in a listing's section, and its score (lease
  -- deadline, time of death) where the reply shows one.
  local SECTION_STATUS = { due = 'pending', ready = 'pending', scheduled = 'pending',
                           later = 'pending', lane = 'pending', lanelater = 'pending',
                           grouped = 'pending',
                           succeeded = 'succeeded', processing = 'processing', dead = 'dead' }
  local function section_status(k, section, id)
    local _, g, plain = section_of(k, section)
    local status = SECTION_STATUS[plain]
    if status ~= 'processing' and status ~= 'dead' then return status end
    return status, redis.call('ZSCORE', g[plain], id)
  end

  local function valid_status(status)
    return LISTINGS[status] ~= nil
  end

  -- list: one page of a queue's messages.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  status                             "" | pending | processing | succeeded | dead
  --   ARGV[2]  limit                              integer 0..1000; 0: only the total
  --   ARGV[3]  cursor                             "" for the first page, else the
  --                                               next_cursor of the previous page
  --   ARGV[4]  error_contains                     "" or text last_error must contain
  --   ARGV[5]  from_ms, ARGV[6] to_ms             "" or bounds on updated_at (epoch ms)
  --   ARGV[7]  rev                                optional: the caller's view of a
  --                                               sharded queue (placement.read_refusal)
  -- Order: pending in claim order (the priority lane, highest first; due
  -- retries and replays, fresh, then scheduled by due time); processing by lease deadline; succeeded and dead by
  -- the time they got there; without status, each of those in turn (pending,
  -- processing, succeeded, dead). A message that stays in the listed state
  -- during a whole walk is listed, whatever workers claim meanwhile.
  -- Bounded work: a call looks at most at 1000 ids (and, with error_contains,
  -- at most REPLY_BYTES of error text), and a page stops before the message
  -- that would take it past REPLY_BYTES (at least one message). So a page may
  -- be short, even empty, before the end: follow next_cursor. total is the size
  -- of the listed states, filtered or not.
  -- Returns {"ok", total, next_cursor ("" at the end), message, ...} | {"bad_cursor"}
  -- | {"reshard"}.
  local function list(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local status, limit, cursor = args[1], to_int(args[2]), args[3] or ''
    if limit == nil or limit < 0 or limit > MAX_BATCH then return bad_arg('limit') end
    if not valid_status(status) then return bad_arg('status') end
    local refused = placement.read_refusal(k, args[7])
    if refused then return refused end
    if limit == 0 then return { 'ok', listing_total(k, status), '' } end
    local needle = args[4] or ''
    local from_ms, to_ms = to_int(args[5] or ''), to_int(args[6] or '')
    if (args[5] or '') ~= '' and from_ms == nil then return bad_arg('from_ms') end
    if (args[6] or '') ~= '' and to_ms == nil then return bad_arg('to_ms') end
    local filtered = needle ~= '' or from_ms ~= nil or to_ms ~= nil
    local out = { 'ok', listing_total(k, status), '' }
    local reply, scanned = budget.new(), 0
    local function visit(id, section)
      local m = load_message(message_key(base, id))
      if not m then return 'skip' end   -- an orphan index entry
      if filtered then
        local updated, err = m.updated_at, m.last_error
        local ok = true
        if needle ~= '' then
          scanned = scanned + #(err or '')
          ok = err and string.find(err, needle, 1, true) ~= nil
        end
        if ok and from_ms and updated < from_ms then ok = false end
        if ok and to_ms and updated > to_ms then ok = false end
        if not ok then return scanned >= REPLY_BYTES and 'last' or 'skip' end
      end
      if not budget.take(reply, m) then return 'full' end
      out[#out + 1] = reply_message(id, m, section_status(k, section, id))
      if #out - 3 >= limit or scanned >= REPLY_BYTES then return 'last' end
      return 'take'
    end
    local next_cursor = walk(k, status, cursor, filtered and FILTER_STEP or limit, visit)
    if not next_cursor then return { 'bad_cursor' } end
    out[3] = next_cursor
    return out
  end

  register('get', get, { 'no-writes' }, 'message')
  register('list', list, { 'no-writes' })

  read.zset_page = zset_page
  read.walk = walk
  read.SECTION_STATUS = SECTION_STATUS
  read.OLD_SECTIONS = OLD_SECTIONS
  read.valid_status = valid_status
end
