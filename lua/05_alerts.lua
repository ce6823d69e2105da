-- Alert webhooks (docs/reference.md "Alerts"; docs/dead-letters.md "Alert webhooks"). Every
-- death appends a "dead" entry to the queue's events stream (emit); retryd
-- instances started with --alert-url read the stream through the consumer
-- group ALERT_GROUP, one consumer each, with the three functions below, and
-- POST one JSON event per entry. An entry leaves the group's pending list
-- only through alerts_ack, after the receiver answered 2xx; an entry a dead
-- instance left pending is claimed back by alerts_take once it has been idle
-- longer than the caller's threshold; a healthy instance keeps its entries
-- fresh with alerts_touch.

local alerts = {}
do
  local ALERT_GROUP, alert_group_info = common.ALERT_GROUP, common.alert_group_info
  local bad_arg, need_timer, now_ms = common.bad_arg, common.need_timer, common.now_ms
  local queue_keys, register = common.queue_keys, common.register
  local stream_id_after, to_int, cut_text = common.stream_id_after, common.to_int, common.cut_text

  -- Deaths older than this when a queue's group is created are not sent.
  local ALERT_BACKLOG_MS = 3600 * 1000
  -- The error an event carries is cut to this many bytes (whole characters).
  local ALERT_ERROR_BYTES = 4096
  local ALERT_TAKE_MAX = 100
  -- alerts_touch looks at most at this many of the consumer's pending entries.
  local ALERT_TOUCH_MAX = 1000


  -- The alert group of the queue's events stream, created when missing at
  -- "ALERT_BACKLOG_MS ago"; nil when the queue has no stream.
  local function alert_group(k, now)
    if redis.call('EXISTS', k.events) == 0 then return nil end
    local info = alert_group_info(k.events)
    if info then return info end
    local start = math.max(0, now - ALERT_BACKLOG_MS) .. '-0'
    redis.call('XGROUP', 'CREATE', k.events, ALERT_GROUP, start)
    return { pending = 0, ['last-delivered-id'] = start }
  end

  -- 1 when the queue has alerts to deliver: entries past the group's
  -- last-delivered id, or entries pending (delivered, not acknowledged); else 0.
  local function alert_work(k, now)
    local group = alert_group(k, now)
    if group == nil then return 0 end
    if tonumber(group.pending) > 0 then return 1 end
    local last = redis.call('XREVRANGE', k.events, '+', '-', 'COUNT', 1)
    if last[1] and stream_id_after(last[1][1], group['last-delivered-id']) then return 1 end
    return 0
  end

  -- The timer hint of a death: the queue is due for a tick now, so that the
  -- timer round of an alerting instance sees the new entry (tick's `alerts`).
  -- The tick also schedules the dead letter's retention, as retention_hint did.
  local function death_hint(k, now)
    return need_timer(k, now, now)
  end

  -- alerts_take: the next alerts for one consumer.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  consumer                           the instance's consumer name
  --   ARGV[2]  count                              1..100, per source
  --   ARGV[3]  min_idle_ms                        entries pending this long with
  --                                               another (dead) consumer are claimed
  --   ARGV[4]  "0" (optional)                     the caller has no --alert-url: a
  --                                               queue without its own alert_url
  --                                               is not taken from (answers {0, ""})
  -- First claims back entries idle for min_idle_ms (XAUTOCLAIM, counted as
  -- alerts_claimed; entries trimmed meanwhile as alerts_dropped), then reads new
  -- ones (XREADGROUP). Entries other than deaths are acknowledged at once.
  -- Returns {more, url, stream_id, id, error, retry_count, at, ...} (five
  -- values per death; error cut to ALERT_ERROR_BYTES); more is 1 when either
  -- read came back full; url is the queue's policy alert_url, read in this call,
  -- or "" when not set (the caller's --alert-url applies).
  local function alerts_take(keys, args)
    local k = queue_keys(keys[1])
    local consumer = args[1]
    local count, min_idle = to_int(args[2]), to_int(args[3])
    if consumer == nil or consumer == '' then return bad_arg('consumer') end
    if count == nil or count < 1 or count > ALERT_TAKE_MAX then return bad_arg('count') end
    if min_idle == nil or min_idle < 0 then return bad_arg('min_idle_ms') end
    local url = flow.alert_url(k) or ''
    if url == '' and args[4] == '0' then return { 0, '' } end
    if alert_group(k, now_ms()) == nil then return { 0, url } end
    local out, ack = { 0, url }, {}
    local function take(entries)
      for i = 1, #entries do
        local e = entries[i]
        if type(e) == 'table' then
          local f = {}
          for j = 1, #e[2], 2 do f[e[2][j]] = e[2][j + 1] end
          if f.event == 'dead' then
            out[#out + 1] = e[1]
            out[#out + 1] = f.id or ''
            out[#out + 1] = cut_text(f.error or '', ALERT_ERROR_BYTES)
            out[#out + 1] = f.retry_count or '0'
            out[#out + 1] = f.at or '0'
          else
            ack[#ack + 1] = e[1]
          end
        end
      end
    end
    local claimed = redis.call('XAUTOCLAIM', k.events, ALERT_GROUP, consumer, min_idle, '0-0',
                               'COUNT', count)
    if #claimed[2] > 0 then redis.call('HINCRBY', k.stats, 'alerts_claimed', #claimed[2]) end
    if claimed[3] and #claimed[3] > 0 then
      redis.call('HINCRBY', k.stats, 'alerts_dropped', #claimed[3])
    end
    take(claimed[2])
    if claimed[1] ~= '0-0' then out[1] = 1 end
    local fresh = redis.call('XREADGROUP', 'GROUP', ALERT_GROUP, consumer, 'COUNT', count,
                             'STREAMS', k.events, '>')
    if fresh and fresh[1] then
      take(fresh[1][2])
      if #fresh[1][2] >= count then out[1] = 1 end
    end
    if #ack > 0 then redis.call('XACK', k.events, ALERT_GROUP, unpack(ack)) end
    return out
  end

  -- alerts_ack: the receiver took these alerts.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV     stream_id...                       1..100
  -- Returns how many were still pending (counted as alerts_delivered).
  local function alerts_ack(keys, args)
    local k = queue_keys(keys[1])
    if #args < 1 or #args > ALERT_TAKE_MAX then return bad_arg('ids') end
    if redis.call('EXISTS', k.events) == 0 or not alert_group_info(k.events) then return 0 end
    local n = redis.call('XACK', k.events, ALERT_GROUP, unpack(args))
    if n > 0 then redis.call('HINCRBY', k.stats, 'alerts_delivered', n) end
    return n
  end

  -- alerts_touch: keeps a consumer's entries from looking idle (so nobody
  -- claims them back) and counts its failed deliveries.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  consumer
  --   ARGV[2]  failures                           delivery failures since the last
  --                                               touch (added to alerts_failed)
  --   ARGV[3..] stream_id...                      0..1000
  -- Only entries the consumer still holds are claimed again (an entry claimed
  -- back by another instance stays with it). Returns the ids still held.
  local function alerts_touch(keys, args)
    local k = queue_keys(keys[1])
    local consumer, failures = args[1], to_int(args[2])
    if consumer == nil or consumer == '' then return bad_arg('consumer') end
    if failures == nil or failures < 0 then return bad_arg('failures') end
    if #args - 2 > ALERT_TOUCH_MAX then return bad_arg('ids') end
    if failures > 0 then redis.call('HINCRBY', k.stats, 'alerts_failed', failures) end
    if #args < 3 or redis.call('EXISTS', k.events) == 0 or not alert_group_info(k.events) then
      return {}
    end
    local mine = {}
    local pending = redis.call('XPENDING', k.events, ALERT_GROUP, '-', '+', ALERT_TOUCH_MAX, consumer)
    for i = 1, #pending do mine[pending[i][1]] = true end
    -- The ids go before JUSTID, so the command is built whole: an unpack()
    -- that is not last in an argument list passes its first value only.
    local claim = { 'XCLAIM', k.events, ALERT_GROUP, consumer, 0 }
    for i = 3, #args do
      if mine[args[i]] then claim[#claim + 1] = args[i] end
    end
    if #claim == 5 then return {} end
    claim[#claim + 1] = 'JUSTID'
    return redis.call(unpack(claim))
  end

  register('alerts_take', alerts_take)
  register('alerts_ack', alerts_ack)
  register('alerts_touch', alerts_touch)

  alerts.death_hint = death_hint
  alerts.alert_work = alert_work
end
