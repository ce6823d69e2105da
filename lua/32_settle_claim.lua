-- settle_claim: the worker loop's settle-then-claim in one call.
do
  local bad_arg, int_arg, message_key = common.bad_arg, common.int_arg, common.message_key
  local need_timer, now_ms, queue_keys = common.need_timer, common.now_ms, common.queue_keys
  local register, to_int = common.register, common.to_int
  local fail_message, load_for = lifecycle.fail_message, lifecycle.load_for
  local retention_hint, take_leased = lifecycle.retention_hint, lifecycle.take_leased
  local death_hint = alerts.death_hint
  local claim_into = leasing.claim_into
  local succeed_message, snooze_message = settle.succeed_message, settle.snooze_message
  local SNOOZE_MAX_MS = settle.SNOOZE_MAX_MS

  -- settle_claim: the worker loop in one call (docs/reference.md "Settle and claim"): settle what the worker
  -- finished, then lease what it takes next.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  lease_ms                           integer 1..43200000
  --   ARGV[2]  count                              integer 0..100 (0: settle only)
  --   ARGV[3]  n                                  settlements that follow, 0..100
  --   ARGV[4 + 6*(i-1) ..], for each settlement i = 1..n, six values:
  --            id                                 the message id
  --            lease_token                        "" accepts any current lease
  --            outcome                            "succeeded" | "failed" | "snoozed"
  --            error                              failed: kept as last_error ("" otherwise)
  --            retryable                          failed: "1" | "0" (0: dead now)
  --            retry_after_ms                     failed: integer >= 0 overrides the
  --                                               backoff; -1 uses min(2^n, 3600) s
  --                                               snoozed: the delay, 0..2592000000
  --                                               (as snooze's delay_ms)
  --   then, optionally, two values from a caller that forwards timer hints:
  --            dead_ttl_ms, succeeded_ttl_ms      the retention it applies
  --   and after them, optionally, one more:
  --            "default"                          lease_ms is the daemon's default:
  --                                               the policy's lease_seconds wins
  --                                               ("request" or "": the request's)
  --   and after that, optionally, one more:
  --            worker                             as claim's ARGV[5] ("" for none)
  --   and after that, optionally, one more:
  --            nonce                              as claim's ARGV[6] ("" for none)
  -- Message keys are derived from KEYS[1]; they share its hash tag and slot.
  -- Every argument is checked before anything is written. Settlements apply in
  -- order, exactly as succeed, fail and snooze do (backoff, dead letters, events,
  -- errors, counters), then the claim runs as claim does (due retries first,
  -- at most REPLY_BYTES of messages, always one); a failure or a snooze due at
  -- once (retry_after_ms 0) may be claimed back in the same call. Nothing is
  -- read back for a settlement: its new state is the whole answer.
  -- Returns {"ok", {status_1, ..., status_n}, message, ...}: status_i is
  -- "succeeded" | "pending" (a retry or a snooze) | "dead" (the message's new state) or "not_found" |
  -- "invalid_state" | "lease_mismatch" (nothing done to it); then zero to count
  -- claimed messages, as claim returns them. One bad item does not stop the others.
  -- With the two optional values a timer hint ends the reply: the earliest of
  -- the new work (retries, retention, leases) the queue's promise did not cover
  -- (need_timer), -1 when none. When they are given and the claim (count > 0)
  -- leased nothing, two more follow, as claim's: the policy's wait_seconds in
  -- ms (-1: not set) and whether the queue is known (1 or 0).
  --
  -- From redis-cli: succeed 41, fail 42 with the backoff, claim the next one:
  --   FCALL retryd_v9_settle_claim 1 'retryd:{emails}' 30000 1 2 \
  --     41 '' succeeded '' 1 -1   42 '' failed 'smtp timeout' 1 -1
  -- and snooze 43 for a minute:   43 '' snoozed '' 1 60000
  local SETTLE_FIELDS = 6

  local function settle_claim(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local lease_ms = to_int(args[1])
    local count = to_int(args[2])
    local n = to_int(args[3])
    if lease_ms == nil or lease_ms < 1 or lease_ms > 43200000 then return bad_arg('lease_ms') end
    if count == nil or count < 0 or count > 100 then return bad_arg('count') end
    if n == nil or n < 0 or n > 100 then return bad_arg('settlements') end
    local lease_source = #args >= 6 + SETTLE_FIELDS * n and args[6 + SETTLE_FIELDS * n]
    local worker, nonce
    if #args >= 7 + SETTLE_FIELDS * n then
      worker = args[7 + SETTLE_FIELDS * n]
      if worker == '' then worker = nil end
      if worker and #worker > 128 then return bad_arg('worker') end
      nonce = args[8 + SETTLE_FIELDS * n]
      if nonce == '' then nonce = nil end
      if nonce and #nonce > 64 then return bad_arg('nonce') end
    end
    local hinted = #args == 5 + SETTLE_FIELDS * n or lease_source
    if #args ~= 3 + SETTLE_FIELDS * n and not hinted then return bad_arg('settlements') end
    if #args > 8 + SETTLE_FIELDS * n then return bad_arg('settlements') end
    local dead_ttl, succeeded_ttl
    if hinted then
      dead_ttl = to_int(args[6 + SETTLE_FIELDS * n - 2])
      succeeded_ttl = to_int(args[6 + SETTLE_FIELDS * n - 1])
      if dead_ttl == nil then return bad_arg('dead_ttl_ms') end
      if succeeded_ttl == nil then return bad_arg('succeeded_ttl_ms') end
    end
    for i = 0, n - 1 do
      local at = 4 + SETTLE_FIELDS * i
      local id, outcome = to_int(args[at]), args[at + 2]
      if id == nil or id < 1 then return bad_arg('id') end
      if outcome ~= 'succeeded' then
        if outcome == 'failed' then
          if args[at + 4] ~= '1' and args[at + 4] ~= '0' then return bad_arg('retryable') end
          if to_int(args[at + 5]) == nil then return bad_arg('retry_after_ms') end
        elseif outcome == 'snoozed' then
          local delay = to_int(args[at + 5])
          if delay == nil or delay < 0 or delay > SNOOZE_MAX_MS then return bad_arg('delay_ms') end
        else
          return bad_arg('outcome')
        end
      end
    end

    local now = now_ms()
    local statuses = {}
    local succeeded, snoozed = 0, 0
    local timer = -1
    -- The earliest hint of all the work this call creates (see need_timer).
    local function hint(t)
      if t >= 0 and (timer < 0 or t < timer) then timer = t end
    end
    for i = 0, n - 1 do
      local at = 4 + SETTLE_FIELDS * i
      local id = args[at]
      local mkey = message_key(base, id)
      local outcome = args[at + 2]
      local succeeding = outcome == 'succeeded'
      local snoozing = not succeeding and outcome == 'snoozed'
      -- A success writes header bytes only: it reads no more than the header.
      local m, e
      if succeeding then
        m, e = take_leased(k, mkey, id, args[at + 1], true)
      elseif snoozing then
        m, e = take_leased(k, mkey, id, args[at + 1])
      else
        m, e = load_for(k, mkey, id, 'processing', args[at + 1])
      end
      if not m then
        statuses[#statuses + 1] = e[1]
      elseif succeeding then
        succeed_message(k, mkey, id, now, m)
        succeeded = succeeded + 1
        statuses[#statuses + 1] = 'succeeded'
      elseif snoozing then
        local due = now + to_int(args[at + 5])
        local wake = snooze_message(k, mkey, id, now, due, m)
        snoozed = snoozed + 1
        statuses[#statuses + 1] = 'pending'
        if hinted then hint(need_timer(k, now, wake)) end
      else
        local status, due = fail_message(k, base, id, now, args[at + 3], args[at + 4] == '1',
                                         to_int(args[at + 5]), m)
        -- A death that moves to the dead_letter_queue is a death to the worker.
        -- (and one its expiry deleted, on_expiry "delete").
        statuses[#statuses + 1] = (status == 'redriving' or status == 'deleted') and 'dead' or status
        if hinted then
          if status == 'pending' then hint(need_timer(k, now, due))
          else hint(death_hint(k, now)) end
        end
      end
    end
    if succeeded > 0 then
      flow.freed(k)
      redis.call('HINCRBY', k.stats, 'succeeded', int_arg(succeeded))
      if hinted then hint(retention_hint(k, now, succeeded_ttl)) end
    end
    if snoozed > 0 then
      flow.freed(k)
      redis.call('HINCRBY', k.stats, 'snoozed', int_arg(snoozed))
    end

    local out = { 'ok', statuses }
    lease_ms = flow.lease_ms(k, lease_ms, lease_source == 'default')
    local got = count > 0 and claim_into(k, base, now, lease_ms, count, out, worker, nonce) or 0
    if got > 0 and hinted then hint(need_timer(k, now, now + lease_ms)) end
    if hinted then out[#out + 1] = timer end
    if hinted and count > 0 and got == 0 then
      -- As claim's empty reply: the policy's wait_ms, whether the queue is known.
      local wait_ms, known = flow.empty_claim(k)
      out[#out + 1] = wait_ms
      out[#out + 1] = known
    end
    return out
  end

  register('settle_claim', settle_claim)
end
