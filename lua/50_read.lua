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
-- Returns ids, next cursor ("" at the end).
local function zset_page(key, cursor, limit)
  local start = 0
  local skip_score, skip_member
  if cursor ~= '' then
    local s, m = string.match(cursor, '^(%d+):(%d+)$')
    if not s then return nil end
    local rank = redis.call('ZRANK', key, m)
    local score = redis.call('ZSCORE', key, m)
    if rank and tonumber(score) == tonumber(s) then
      start = rank + 1
    else
      -- The cursor's member left the index: restart at its score and skip
      -- the members that sorted before it (Redis orders ties bytewise).
      start = redis.call('ZCOUNT', key, '-inf', '(' .. s)
      skip_score, skip_member = tonumber(s), m
    end
  end
  local rows = redis.call('ZRANGE', key, start, start + limit + 63, 'WITHSCORES')
  local ids, last = {}, nil
  local i = 1
  while i < #rows and #ids < limit do
    local member, score = rows[i], tonumber(rows[i + 1])
    if not (skip_score and score == skip_score and member <= skip_member) then
      ids[#ids + 1] = member
      last = string.format('%d:%s', score, member)
    end
    i = i + 2
  end
  if last and (i < #rows or start + (i - 1) / 2 < redis.call('ZCARD', key)) then
    return ids, last
  end
  return ids, ''
end

-- One page of the ready LIST in claim order (from the right), from offset.
local function ready_page(key, offset, limit)
  local rows = redis.call('LRANGE', key, -(offset + limit), -(offset + 1))
  local ids = {}
  for i = #rows, 1, -1 do ids[#ids + 1] = rows[i] end
  return ids
end

-- list: one page of a queue's messages.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   ARGV[1]  status                             "" | pending | processing | succeeded | dead
--   ARGV[2]  limit                              integer 1..1000
--   ARGV[3]  cursor                             "" for the first page, else the
--                                               next_cursor of the previous page
-- Order: pending in claim order (ready, then scheduled by due time);
-- processing by lease deadline; succeeded and dead by the time they got there;
-- without status, newest id first (a page may come back short when many ids
-- were deleted; follow next_cursor).
-- Returns {"ok", total, next_cursor ("" at the end), message, ...} | {"bad_cursor"}.
local function list(keys, args)
  local base = keys[1]
  local k = queue_keys(base)
  local status, limit, cursor = args[1], to_int(args[2]), args[3] or ''
  if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end

  local ids, next_cursor, total = {}, '', 0
  if status == 'pending' then
    total = redis.call('LLEN', k.ready) + redis.call('ZCARD', k.scheduled)
    local section, rest = string.match(cursor, '^(%a):(.*)$')
    if cursor == '' then section, rest = 'r', '0' end
    if section == 'r' then
      local offset = to_int(rest)
      if offset == nil or offset < 0 then return { 'bad_cursor' } end
      ids = ready_page(k.ready, offset, limit)
      if #ids == limit then
        next_cursor = 'r:' .. (offset + limit)
      elseif redis.call('ZCARD', k.scheduled) > 0 then
        local more, c = zset_page(k.scheduled, '', limit - #ids)
        for i = 1, #more do ids[#ids + 1] = more[i] end
        if c ~= '' then next_cursor = 's:' .. c end
      end
    elseif section == 's' then
      local c
      ids, c = zset_page(k.scheduled, rest, limit)
      if not ids then return { 'bad_cursor' } end
      if c ~= '' then next_cursor = 's:' .. c end
    else
      return { 'bad_cursor' }
    end
  elseif status == 'processing' or status == 'succeeded' or status == 'dead' then
    local index = k[status]
    total = redis.call('ZCARD', index)
    ids, next_cursor = zset_page(index, cursor, limit)
    if not ids then return { 'bad_cursor' } end
  elseif status == '' then
    total = redis.call('LLEN', k.ready) + redis.call('ZCARD', k.scheduled)
          + redis.call('ZCARD', k.processing) + redis.call('ZCARD', k.succeeded)
          + redis.call('ZCARD', k.dead)
    local from
    if cursor == '' then
      from = to_int(redis.call('GET', k.seq) or '0')
    else
      from = to_int(cursor)
      if from == nil or from < 0 then return { 'bad_cursor' } end
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
    return bad_arg('status')
  end

  local out = { 'ok', total, next_cursor }
  for i = 1, #ids do
    local mkey = message_key(base, ids[i])
    if redis.call('EXISTS', mkey) == 1 then out[#out + 1] = message_reply(mkey, ids[i]) end
  end
  return out
end

redis.register_function{ function_name = 'get', callback = get, flags = { 'no-writes' } }
redis.register_function{ function_name = 'list', callback = list, flags = { 'no-writes' } }
