-- get: one message.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   KEYS[2]  <prefix>:{q}:m:<id>                the message
--   ARGV[1]  id
-- Returns {"ok", message} | {"not_found"}.
local function get(keys, args)
  if redis.call('EXISTS', keys[2]) == 0 then return { 'not_found' } end
  return { 'ok', message_reply(keys[2], args[1]) }
end

-- One page of a ZSET index in (score, member) order after cursor "score:id".
-- Returns ids, next cursor ("" at the end); nil for a malformed cursor.
local function zset_page(key, cursor, limit)
  local start = 0
  if cursor ~= '' then
    local s, m = string.match(cursor, '^(%d+):(%d+)$')
    if not s then return nil end
    local rank = redis.call('ZRANK', key, m)
    local score = redis.call('ZSCORE', key, m)
    if rank and tonumber(score) == tonumber(s) then
      start = rank + 1
    else
      -- The cursor's member left the index: binary-search its place among
      -- the members of the same score (Redis orders ties bytewise).
      local lo = redis.call('ZCOUNT', key, '-inf', '(' .. s)
      local hi = redis.call('ZCOUNT', key, '-inf', s)
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        local member = redis.call('ZRANGE', key, mid, mid)[1]
        if member <= m then lo = mid + 1 else hi = mid end
      end
      start = lo
    end
  end
  local rows = redis.call('ZRANGE', key, start, start + limit - 1, 'WITHSCORES')
  local ids = {}
  for i = 1, #rows, 2 do ids[#ids + 1] = rows[i] end
  if #ids == limit and start + limit < redis.call('ZCARD', key) then
    return ids, string.format('%d:%s', tonumber(rows[#rows]), rows[#rows - 1])
  end
  return ids, ''
end

-- One page of a LIST in claim order (from the right), from offset.
local function list_page(key, offset, limit)
  local rows = redis.call('LRANGE', key, -(offset + limit), -(offset + 1))
  local ids = {}
  for i = #rows, 1, -1 do ids[#ids + 1] = rows[i] end
  return ids
end

-- The pending listing walks three sections in claim order: the due list
-- ("d:<offset>"), the ready list ("r:<offset>"), then scheduled by due time
-- ("s:<score>:<id>"). Returns ids, next cursor; nil for a malformed cursor.
local function pending_page(k, cursor, limit)
  local section, rest = string.match(cursor, '^(%a):(.*)$')
  if cursor == '' then section, rest = 'd', '0' end
  local order = { d = 1, r = 2, s = 3 }
  local at = order[section]
  if not at then return nil end
  local ids = {}
  local lists = { k.due, k.ready }
  for sec = at, 2 do
    local offset = 0
    if sec == at then
      offset = to_int(rest)
      if offset == nil or offset < 0 then return nil end
    end
    local more = list_page(lists[sec], offset, limit - #ids)
    for i = 1, #more do ids[#ids + 1] = more[i] end
    if #ids == limit then
      return ids, (sec == 1 and 'd:' or 'r:') .. (offset + #more)
    end
  end
  local zcursor = at == 3 and rest or ''
  local more, c = zset_page(k.scheduled, zcursor, limit - #ids)
  if not more then return nil end
  for i = 1, #more do ids[#ids + 1] = more[i] end
  if c ~= '' then return ids, 's:' .. c end
  return ids, ''
end

-- The ids of one page of a listing, its next cursor ("" at the end) and the
-- total of the listed states. nil when the cursor is malformed; raises for an
-- unknown status.
local function select_ids(base, k, status, limit, cursor)
  local ids, next_cursor, total = {}, '', 0
  if status == 'pending' then
    total = redis.call('LLEN', k.due) + redis.call('LLEN', k.ready)
          + redis.call('ZCARD', k.scheduled)
    ids, next_cursor = pending_page(k, cursor, limit)
  elseif status == 'processing' or status == 'succeeded' or status == 'dead' then
    local index = k[status]
    total = redis.call('ZCARD', index)
    ids, next_cursor = zset_page(index, cursor, limit)
  elseif status == '' then
    total = redis.call('LLEN', k.due) + redis.call('LLEN', k.ready)
          + redis.call('ZCARD', k.scheduled) + redis.call('ZCARD', k.processing)
          + redis.call('ZCARD', k.succeeded) + redis.call('ZCARD', k.dead)
    local from
    if cursor == '' then
      from = to_int(redis.call('GET', k.seq) or '0')
    else
      from = to_int(cursor)
      if from == nil or from < 0 then return nil end
    end
    -- Probe at most a bounded number of ids per call, present or not.
    local id = from
    local probes = 0
    while id >= 1 and #ids < limit and probes < MAX_BATCH + limit do
      if redis.call('EXISTS', message_key(base, id)) == 1 then ids[#ids + 1] = tostring(id) end
      id = id - 1
      probes = probes + 1
    end
    if id >= 1 then next_cursor = tostring(id) end
  else
    error('ERR retryd: bad argument status')
  end
  if not ids then return nil end
  return ids, next_cursor, total
end

-- select_ids with filters: last_error containing needle (plain text) and
-- updated_at within [from_ms, to_ms] ("" for no bound). Pages through the
-- index in steps no larger than the room left, so the cursor never skips an
-- unexamined id; examines at most MAX_BATCH ids per call, so a page may come
-- back short (even empty) with a next cursor.
local function filtered_ids(base, k, status, limit, cursor, needle, from_ms, to_ms)
  if needle == '' and from_ms == nil and to_ms == nil then
    return select_ids(base, k, status, limit, cursor)
  end
  local out, examined, total = {}, 0, 0
  local next_cursor = cursor
  repeat
    local room = math.min(limit - #out, MAX_BATCH - examined)
    local ids, c, t = select_ids(base, k, status, room, next_cursor)
    if not ids then return nil end
    total = t
    examined = examined + math.max(#ids, 1)
    for i = 1, #ids do
      local h = redis.call('HMGET', message_key(base, ids[i]), 'last_error', 'updated_at')
      local updated = tonumber(h[2] or '')
      local ok = true
      if needle ~= '' then ok = h[1] and string.find(h[1], needle, 1, true) ~= nil end
      if ok and from_ms and (updated == nil or updated < from_ms) then ok = false end
      if ok and to_ms and (updated == nil or updated > to_ms) then ok = false end
      if ok then out[#out + 1] = ids[i] end
    end
    next_cursor = c
  until next_cursor == '' or #out >= limit or examined >= MAX_BATCH
  return out, next_cursor, total
end

-- list: one page of a queue's messages.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   ARGV[1]  status                             "" | pending | processing | succeeded | dead
--   ARGV[2]  limit                              integer 1..1000
--   ARGV[3]  cursor                             "" for the first page, else the
--                                               next_cursor of the previous page
--   ARGV[4]  error_contains                     "" or text last_error must contain
--   ARGV[5]  from_ms, ARGV[6] to_ms             "" or bounds on updated_at (epoch ms)
-- With a filter, total is still the size of the listed states, and a page
-- may be short (even empty) before the end: follow next_cursor.
-- Order: pending in claim order (due retries and replays, fresh, then
-- scheduled by due time); processing by lease deadline; succeeded and dead by
-- the time they got there; without status, newest id first (a page may come
-- back short when many ids were deleted; follow next_cursor).
-- Returns {"ok", total, next_cursor ("" at the end), message, ...} | {"bad_cursor"}.
local function list(keys, args)
  local base = keys[1]
  local k = queue_keys(base)
  local status, limit, cursor = args[1], to_int(args[2]), args[3] or ''
  if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
  if status ~= '' and status ~= 'pending' and status ~= 'processing' and
     status ~= 'succeeded' and status ~= 'dead' then return bad_arg('status') end
  local needle = args[4] or ''
  local from_ms, to_ms = to_int(args[5] or ''), to_int(args[6] or '')
  if (args[5] or '') ~= '' and from_ms == nil then return bad_arg('from_ms') end
  if (args[6] or '') ~= '' and to_ms == nil then return bad_arg('to_ms') end
  local ids, next_cursor, total = filtered_ids(base, k, status, limit, cursor, needle, from_ms,
                                               to_ms)
  if not ids then return { 'bad_cursor' } end
  local out = { 'ok', total, next_cursor }
  for i = 1, #ids do
    local mkey = message_key(base, ids[i])
    if redis.call('EXISTS', mkey) == 1 then out[#out + 1] = message_reply(mkey, ids[i]) end
  end
  return out
end

register('get', get, { 'no-writes' })
register('list', list, { 'no-writes' })
