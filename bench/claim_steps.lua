#!lua name=retryd_bench_steps
-- claim_steps.lua - for `make bench` only: retryd's claim (lua/
-- 20_claim.lua, count 1) rebuilt one piece at a time, so the benchmark can
-- show where the claim's Redis time goes beyond the three commands of
-- min_claim. Step N does everything step N-1 does, plus:
--   claim_step0  RPOP ready, SETRANGE of the 15 header bytes claim writes
--                (docs/storage.md), ZADD processing; reply {"ok", id}
--   claim_step1  "now" from TIME (the lease deadline and token use it)
--   claim_step2  queue_keys(): the table of eleven key names, built per call
--   claim_step3  promote_due(): ZRANGE of due scheduled ids (none here)
--   claim_step4  RPOP of the due list (retries first; empty here)
--   claim_step5  the claimed serial: HGET stats before, HINCRBY after
--   claim_step6  GET of the message record and its header decoded (struct):
--                skips deleted ids, and the lease is written from it
--   claim_step7  the whole message in the reply, by position as claim
--                answers it (leased_reply in lua/00_common.lua)
-- Step 7 is what claim does for count 1, minus its loop bookkeeping (and
-- claim keeps its key names between calls: step 2 builds them each call).
--   KEYS[1]  <prefix>:{q}                       queue key base (retryd's layout)
-- Returns {"ok", id} (steps 0-6) or {"ok", {id, payload, retry_count,
-- max_retries, created_at, updated_at, lease_expires_at, lease_token}} (7),
-- or {"ok"} when nothing is ready.
local function queue_keys(base)
  return {
    due = base .. ':3:due', ready = base .. ':3:ready', scheduled = base .. ':3:scheduled',
    processing = base .. ':3:processing', dead = base .. ':3:dead',
    succeeded = base .. ':3:succeeded', seq = base .. ':seq', stats = base .. ':stats',
    wake = base .. ':wake', errors = base .. ':errors', events = base .. ':events',
  }
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local LEASE_MS = 30000

local function step(level)
  return function(keys)
    local base = keys[1]
    local k
    if level >= 2 then
      k = queue_keys(base)
    else
      k = { ready = base .. ':3:ready', processing = base .. ':3:processing' }
    end
    local now = 1796000000000
    if level >= 1 then now = now_ms() end
    if level >= 3 then
      redis.call('ZRANGE', k.scheduled, '-inf', now, 'BYSCORE', 'LIMIT', 0, 100)
    end
    local serial = 0
    if level >= 5 then serial = tonumber(redis.call('HGET', k.stats, 'claimed') or '0') end
    if level >= 4 then redis.call('RPOP', k.due, 1) end
    local ids = redis.call('RPOP', k.ready, 1)
    if not ids then return { 'ok' } end
    local id = ids[1]
    local mkey = base .. ':m:' .. id
    local rec, created, rc, mr = nil, now, 0, 3
    if level >= 6 then
      rec = redis.call('GET', mkey)
      local _
      _, rc, mr, created = struct.unpack('>BBBI6', rec)
    end
    local deadline = now + LEASE_MS
    local d = now - created
    redis.call('SETRANGE', mkey, 9, struct.pack('>i5i5I5', d, d, serial + 1))
    redis.call('ZADD', k.processing, deadline, id)
    local out = { 'ok', id }
    if level >= 7 then
      out[2] = { id, string.sub(rec, 25), rc, mr, created, now, deadline,
                 string.format('%x.%x', now, serial + 1) }
    end
    if level >= 5 then redis.call('HINCRBY', k.stats, 'claimed', 1) end
    return out
  end
end

for level = 0, 7 do
  redis.register_function('claim_step' .. level, step(level))
end
