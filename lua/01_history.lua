-- The per-attempt history of a message and the worker of its lease (docs/reference.md "History",
-- docs/dead-letters.md §1). Both live in the record's trailer (docs/storage.md),
-- so a message that never failed and was claimed without a worker has no
-- trailer for them: claim and succeed of it write the header bytes they always
-- wrote. The module `history`: the record codec (02_record.lua) and the
-- lifecycle (04_lifecycle.lua) call it.
--
-- Trailer keys (beside e, r, i, t of 02_record.lua):
--   w  the worker named by the claim of the current lease (1-128 bytes)
--   h  the history, oldest first, at most HISTORY_MAX entries:
--        a failure   {at - created_at (ms), attempt, flags, error[, worker]}
--                    flags: 1 = the lease expired
--        a replay    {at - created_at (ms)}
--        a snooze    {at - created_at (ms), attempt, flags, "", "", until - created_at (ms)}
--                    flags: 2 = a snooze (docs/reference.md "Snooze"); shaped as
--                    a failure so that retryd_v4, which reads every entry of
--                    more than one value as a failure, shows it as one (attempt,
--                    empty error) instead of failing on it
--   d  how many older entries were dropped (absent when none)
--   e  true (instead of the text) when last_error is the newest entry's
--      error, so a failure stores its error once

local history = {}
do

  local HISTORY_MAX = 20
  -- An entry keeps at most this many bytes of its error (whole UTF-8
  -- characters); last_error keeps the whole text.
  local HISTORY_ERROR_BYTES = 1024
  local HISTORY_LEASE_EXPIRED = 1
  local HISTORY_SNOOZED = 2

  -- err cut to at most HISTORY_ERROR_BYTES, before a continuation byte.
  local function history_error(err)
    if #err <= HISTORY_ERROR_BYTES then return err end
    local cut = HISTORY_ERROR_BYTES
    while cut > 0 do
      local b = string.byte(err, cut + 1)
      if b < 0x80 or b >= 0xC0 then break end
      cut = cut - 1
    end
    return string.sub(err, 1, cut)
  end

  -- Appends one entry, dropping (and counting) the oldest past HISTORY_MAX.
  local function history_push(m, entry)
    local h = m.history or {}
    h[#h + 1] = entry
    if #h > HISTORY_MAX then
      table.remove(h, 1)
      m.history_dropped = (m.history_dropped or 0) + 1
    end
    m.history = h
  end

  -- The trailer's table t (unpacked) into m.
  function history.decode(m, t)
    m.worker = t.w
    if t.h then
      m.history, m.history_dropped = t.h, t.d or 0
      if t.e == true then m.last_error = t.h[#t.h][4] end
    end
  end

  -- m's worker and history into the trailer's table t (t.e already set);
  -- true when it added anything.
  function history.encode(m, t)
    local any = false
    if m.worker then t.w = m.worker; any = true end
    local h = m.history
    if h and #h > 0 then
      t.h = h
      any = true
      if (m.history_dropped or 0) > 0 then t.d = m.history_dropped end
      local last = h[#h]
      if t.e ~= nil and #last >= 4 and last[4] == t.e then t.e = true end
    end
    return any
  end

  -- A failure of the current attempt (a worker's, a lease expiry when
  -- m.lease_expired is set, a kill): called before retry_count moves. The
  -- lease's worker goes into the entry and leaves the record.
  function history.failed(m, now, err)
    local flags = 0
    if m.lease_expired then flags = HISTORY_LEASE_EXPIRED end
    history_push(m, { now - m.created_at, m.retry_count + 1, flags, history_error(err or ''),
                      m.worker })
    m.worker, m.lease_expired = nil, nil
  end

  -- A replay mark.
  function history.replayed(m, now)
    history_push(m, { now - m.created_at })
  end

  -- Whether a history entry (not a replay mark) is a snooze mark.
  local function is_snooze(e)
    return #e >= 6 and math.floor(e[3] / HISTORY_SNOOZED) % 2 == 1
  end
  history.is_snooze = is_snooze

  -- A snooze mark: the current attempt was put off until `due` (ms) without
  -- counting (retry_count stays). attempt is the one put off (retry_count + 1),
  -- as a failure's, for retryd_v4's reading. The lease's worker leaves the
  -- record, as a failure's does.
  function history.snoozed(m, now, due)
    history_push(m, { now - m.created_at, m.retry_count + 1, HISTORY_SNOOZED, '', '',
                      due - m.created_at })
    m.worker = nil
  end

  -- The reply fields: worker while processing; history_dropped and history
  -- (a flat array, six strings per entry: kind "failed" | "replayed" |
  -- "snoozed", at (ms), attempt (a snooze: until, ms), lease_expired "1" | "0",
  -- worker ("" for none), error; "" where a kind has none) when the message
  -- has a history.
  function history.reply(m, status, add)
    if status == 'processing' and m.worker then add('worker', m.worker) end
    local h = m.history
    if not h or #h == 0 then return end
    local flat = {}
    for i = 1, #h do
      local e = h[i]
      local at = string.format('%d', m.created_at + e[1])
      if #e == 1 then
        flat[#flat + 1] = 'replayed'
        flat[#flat + 1] = at
        flat[#flat + 1] = ''
        flat[#flat + 1] = ''
        flat[#flat + 1] = ''
        flat[#flat + 1] = ''
      elseif is_snooze(e) then
        flat[#flat + 1] = 'snoozed'
        flat[#flat + 1] = at
        flat[#flat + 1] = string.format('%d', m.created_at + e[6])
        flat[#flat + 1] = ''
        flat[#flat + 1] = ''
        flat[#flat + 1] = ''
      else
        flat[#flat + 1] = 'failed'
        flat[#flat + 1] = at
        flat[#flat + 1] = string.format('%d', e[2])
        flat[#flat + 1] = (e[3] % 2 == 1) and '1' or '0'
        flat[#flat + 1] = e[5] or ''
        flat[#flat + 1] = e[4]
      end
    end
    add('history_dropped', string.format('%d', m.history_dropped or 0))
    add('history', flat)
  end
end
