-- A queue's tags (SQS's TagQueue, UntagQueue, ListQueueTags): the HASH
-- k.tags, tag -> value (docs/reference.md "Tags"). No module table: no later
-- file uses these.
do
  local bad_arg, queue_keys, register = common.bad_arg, common.queue_keys, common.register

  -- SQS's limits: 50 tags a queue, a key of 1-128 bytes, a value of 0-256.
  local MAX_TAGS, MAX_TAG_KEY_BYTES, MAX_TAG_VALUE_BYTES = 50, 128, 256

  -- tags_set: add or change tags.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1..] key, value, ...                   1-50 pairs; key 1..128 bytes,
  --                                               value 0..256 bytes
  -- Returns {"ok", count} (the tags the queue has now) or {"too_many", count}
  -- (they would pass 50: nothing changed).
  local function tags_set(keys, args)
    local k = queue_keys(keys[1])
    if #args == 0 or #args % 2 ~= 0 or #args > 2 * MAX_TAGS then return bad_arg('pairs') end
    local new = 0
    for i = 1, #args, 2 do
      local key, value = args[i], args[i + 1]
      if #key < 1 or #key > MAX_TAG_KEY_BYTES then return bad_arg('key') end
      if #value > MAX_TAG_VALUE_BYTES then return bad_arg('value') end
    end
    local had = redis.call('HLEN', k.tags)
    local seen = {}
    for i = 1, #args, 2 do
      local key = args[i]
      if not seen[key] then
        seen[key] = true
        if redis.call('HEXISTS', k.tags, key) == 0 then new = new + 1 end
      end
    end
    if had + new > MAX_TAGS then return { 'too_many', had } end
    redis.call('HSET', k.tags, unpack(args))
    return { 'ok', had + new }
  end

  -- tags_remove: remove tags (a key it does not have is no error).
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1..] key, ...                          1-50 keys
  -- Returns {"ok", count} (the tags left).
  local function tags_remove(keys, args)
    local k = queue_keys(keys[1])
    if #args == 0 or #args > MAX_TAGS then return bad_arg('keys') end
    redis.call('HDEL', k.tags, unpack(args))
    return { 'ok', redis.call('HLEN', k.tags) }
  end

  -- tags_get: the queue's tags.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  -- Returns {key, value, ...} (at most 50 pairs), in no order.
  local function tags_get(keys, args)
    return redis.call('HGETALL', queue_keys(keys[1]).tags)
  end

  register('tags_set', tags_set)
  register('tags_remove', tags_remove)
  register('tags_get', tags_get, { 'no-writes' })
end
