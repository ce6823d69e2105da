-- enqueue: create a pending message.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   ARGV[1]  payload                            opaque bytes, stored as given
--   ARGV[2]  max_retries                        integer 1..10
--   ARGV[3]  delay_ms                           integer >= 0; > 0 schedules it
-- Returns {"ok", message}.
local function enqueue(keys, args)
  local base = keys[1]
  local k = queue_keys(base)
  local payload = args[1]
  local max_retries = to_int(args[2])
  local delay_ms = to_int(args[3] or '0')
  if payload == nil then return bad_arg('payload') end
  if max_retries == nil or max_retries < 1 or max_retries > 10 then return bad_arg('max_retries') end
  if delay_ms == nil or delay_ms < 0 then return bad_arg('delay_ms') end

  local now = now_ms()
  local id = redis.call('INCR', k.seq)
  local mkey = message_key(base, id)
  if delay_ms > 0 then
    redis.call('HSET', mkey, 'payload', payload, 'status', 'pending', 'retry_count', 0,
               'max_retries', max_retries, 'created_at', now, 'updated_at', now,
               'retry_after', now + delay_ms)
    redis.call('ZADD', k.scheduled, now + delay_ms, id)
  else
    redis.call('HSET', mkey, 'payload', payload, 'status', 'pending', 'retry_count', 0,
               'max_retries', max_retries, 'created_at', now, 'updated_at', now)
    redis.call('LPUSH', k.ready, id)
  end
  redis.call('HINCRBY', k.stats, 'enqueued', 1)
  return { 'ok', message_reply(mkey, id) }
end

redis.register_function('enqueue', enqueue)

