-- claim: lease up to `count` messages, due retries before fresh ones.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   ARGV[1]  lease_ms                           integer 1..43200000
--   ARGV[2]  count                              integer 1..100 (default 1)
-- Promotes due scheduled ids first (at most 100), then pops from the due list
-- (retries and replays, oldest first), then from ready (fresh, FIFO). Ids
-- whose message was deleted while they waited are dropped, and popping goes on
-- (at most 100 such ids per call).
--   ARGV[3]  "1" (optional)                     the caller forwards timer hints
-- Returns {"ok", message, ...}: zero messages when nothing is claimable. Each
-- message carries lease_token (unique per claim) and lease_expires_at. With
-- ARGV[3] a timer hint follows the messages: the one of the new leases'
-- deadline (need_timer), -1 when none was needed.
local function claim(keys, args)
  local base = keys[1]
  local k = queue_keys(base)
  local lease_ms = to_int(args[1])
  local count = to_int(args[2] or '1')
  if lease_ms == nil or lease_ms < 1 or lease_ms > 43200000 then return bad_arg('lease_ms') end
  if count == nil or count < 1 or count > 100 then return bad_arg('count') end

  local now = now_ms()
  promote_due(k, now, math.max(count, PROMOTE_IN_CLAIM))
  local out = { 'ok' }
  local deadline = now + lease_ms
  -- Reserve `count` serials in one call; give back the ones not used.
  local serial = redis.call('HINCRBY', k.stats, 'claimed', count) - count
  local skipped = 0
  local lists = { k.due, k.ready }
  for l = 1, 2 do
    while #out - 1 < count and skipped <= 100 do
      local ids = redis.call('RPOP', lists[l], count - (#out - 1))
      if not ids then break end
      for i = 1, #ids do
        local id = ids[i]
        local mkey = message_key(base, id)
        if redis.call('EXISTS', mkey) == 1 then
          serial = serial + 1
          local token = string.format('%x.%x', now, serial)
          redis.call('HSET', mkey, 'status', 'processing', 'lease_token', token,
                     'lease_expires_at', deadline, 'updated_at', now)
          redis.call('ZADD', k.processing, deadline, id)
          out[#out + 1] = message_reply(mkey, id)
        else
          skipped = skipped + 1
        end
      end
    end
  end
  if #out - 1 < count then redis.call('HINCRBY', k.stats, 'claimed', (#out - 1) - count) end
  if args[3] == '1' then
    local timer = -1
    if #out > 1 then timer = need_timer(k, now, deadline) end
    out[#out + 1] = timer
  end
  return out
end

redis.register_function('claim', claim)

