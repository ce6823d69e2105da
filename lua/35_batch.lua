-- Batches of leased messages: release, succeed_many, release_lost.
do
  local bad_arg, int_arg, message_key = common.bad_arg, common.int_arg, common.message_key
  local notify, now_ms, old_keys = common.notify, common.now_ms, common.old_keys
  local queue_keys, register, to_int = common.queue_keys, common.register, common.to_int
  local lease_token, load_header = record.lease_token, record.load_header
  local load_message = record.load_message
  local load_legacy, set_updated = record.load_legacy, record.set_updated
  local to_claim_end = record.to_claim_end
  local lift, retention_hint = lifecycle.lift, lifecycle.retention_hint
  local take_leased, expiry_track = lifecycle.take_leased, lifecycle.expiry_track
  local succeed_message = settle.succeed_message

  -- release: hand leased messages back without counting a failure (a long-poll
  -- client went away before its claim was answered).
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV     id1, lease_token1, id2, lease_token2, ...   (at most 100 pairs)
  -- Each message still under that lease goes back to the claim end of the due
  -- list (it is claimed next), pending, as it was before the claim; one of
  -- priority 1-9 goes first of its priority into the lane (docs/lifecycle.md
  -- "Priority"). Publishes on the wake channel.
  -- Returns the number released.
  local function release(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    if #args % 2 ~= 0 or #args > 200 then return bad_arg('pairs') end
    local now = now_ms()
    local released = 0
    for i = #args - 1, 1, -2 do
      local id, token = args[i], args[i + 1]
      local mkey = message_key(base, id)
      local m
      if redis.call('ZSCORE', k.processing, id) then
        m = groups.used(k) and load_message(mkey) or load_header(mkey)   -- as take_leased
      else
        -- Leased by retryd_v2: lifted (under the same lease) before it goes back.
        local s = redis.call('ZSCORE', old_keys(k).processing, id)
        m = s and load_legacy(mkey)
        if m and m.legacy and lease_token(m) == token then lift(k, mkey, id, m, 'processing', s) end
      end
      if m and lease_token(m) == token then
        redis.call('ZREM', k.processing, id)
        set_updated(mkey, m, now)
        to_claim_end(k, base, id, m.priority, m.group)
        if m.group then groups.left_processing(k, m.group, flow.group_waits(k)) end
        expiry_track(k, id, m)
        released = released + 1
      end
    end
    if released > 0 then
      redis.call('HINCRBY', k.stats, 'released', released)
      notify(k)
    end
    return released
  end

  -- succeed_many: settle a batch of processing messages in one call.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV     id1, lease_token1 or "", id2, lease_token2 or "", ...  (1..100 pairs)
  --            [, succeeded_ttl_ms]  (optional: given by a caller that forwards
  --            timer hints: its retention)
  -- Message keys are derived from KEYS[1]; they share its hash tag and slot.
  -- Returns one code per pair, in order: "succeeded" | "not_found" |
  -- "invalid_state" | "lease_mismatch"; with succeeded_ttl_ms, then the timer
  -- hint of the retention expiry (need_timer). One bad item does not stop the
  -- others.
  local function succeed_many(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local ttl, hinting = 0, #args % 2 == 1
    if hinting then ttl = to_int(table.remove(args)) end
    if ttl == nil then return bad_arg('succeeded_ttl_ms') end
    if #args == 0 or #args > 200 then return bad_arg('pairs') end
    local now = now_ms()
    local out = {}
    local done = 0
    for i = 1, #args, 2 do
      local id, token = args[i], args[i + 1]
      local mkey = message_key(base, id)
      local m, err = take_leased(k, mkey, id, token, true)
      if not m then
        out[#out + 1] = err[1]
      else
        succeed_message(k, mkey, id, now, m)
        out[#out + 1] = 'succeeded'
        done = done + 1
      end
    end
    local timer = -1
    if done > 0 then
      flow.freed(k)
      redis.call('HINCRBY', k.stats, 'succeeded', int_arg(done))
      if hinting then timer = retention_hint(k, now, ttl) end
    end
    if hinting then out[#out + 1] = timer end
    return out
  end

  register('release', release)
  register('succeed_many', succeed_many)

  -- release_lost: hand back what claims leased when their answer never reached
  -- the daemon (the link dropped, or Redis stalled past the daemon's timeout:
  -- the client got 503 outcome-unknown). docs/durability.md "A claim whose
  -- answer is lost".
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV     nonce, ...                         1..10, as claim and settle_claim
  --                                               carried them
  -- For each nonce whose claim ran (its record <base>:claim:<nonce> is there),
  -- every message still under the lease that claim made goes back to the claim
  -- end of the due list, pending, exactly as release does (counted released,
  -- not failed: retry_count, history and the retry budget untouched), and the
  -- record is deleted. A nonce whose claim has not run yet (its command still
  -- on its way) is given up: an empty record is left for 15 s, and that claim,
  -- when it runs, hands back everything it leased. At most 10 nonces of at
  -- most 100 messages each per call.
  -- Returns the number of messages released.
  register('release_lost', function(keys, args)
    local k = queue_keys(keys[1])
    if #args == 0 or #args > 10 then return bad_arg('nonces') end
    local released = 0
    for i = 1, #args do
      local nonce = args[i]
      if nonce == '' or #nonce > 64 then return bad_arg('nonce') end
    end
    for i = 1, #args do
      local key = k.claims .. args[i]
      local rec = redis.call('GET', key)
      if not rec then
        redis.call('SET', key, '', 'PX', '15000')
      elseif rec ~= '' then
        local leased = {}
        for id, token in string.gmatch(rec, '(%S+) (%S+) ') do
          leased[#leased + 1] = id
          leased[#leased + 1] = token
        end
        redis.call('DEL', key)
        if #leased > 0 then released = released + release(keys, leased) end
      end
    end
    return released
  end)
end
