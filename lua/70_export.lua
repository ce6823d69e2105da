-- export: pages of messages as CSV, JSON lines or TSV.
do
  local MAX_BATCH, REPLY_BYTES, bad_arg = common.MAX_BATCH, common.REPLY_BYTES, common.bad_arg
  local message_key, ms_text, queue_keys = common.message_key, common.ms_text, common.queue_keys
  local register, to_int = common.register, common.to_int
  local load_message = record.load_message
  local is_snooze = history.is_snooze
  local OLD_SECTIONS, SECTION_STATUS = read.OLD_SECTIONS, read.SECTION_STATUS
  local valid_status, walk = read.valid_status, read.walk

  -- RFC 3339 UTC with milliseconds from epoch ms (Howard Hinnant's civil_from_days).
  local function iso_time(ms)
    if not ms or ms == '' then return '' end
    ms = tonumber(ms)
    local secs = math.floor(ms / 1000)
    local days = math.floor(secs / 86400)
    local rem = secs - days * 86400
    local z = days + 719468
    local era = math.floor(z / 146097)
    local doe = z - era * 146097
    local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
                            - math.floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
    local mp = math.floor((5 * doy + 2) / 153)
    local d = doy - math.floor((153 * mp + 2) / 5) + 1
    local m = mp < 10 and mp + 3 or mp - 9
    local y = yoe + era * 400 + (m <= 2 and 1 or 0)
    return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', y, m, d,
                         math.floor(rem / 3600), math.floor(rem % 3600 / 60), rem % 60, ms % 1000)
  end

  -- One CSV cell (RFC 4180). Payloads and errors come from producers and
  -- workers, so a cell a spreadsheet would run as a formula (it starts with
  -- = + - @ TAB or CR) is neutralised as OWASP's "CSV Injection" page says:
  -- a single quote in front, and the cell quoted.
  local function csv_field(s)
    s = s or ''
    if string.find(s, '^[=+%-@\t\r]') then
      return '"\'' .. string.gsub(s, '"', '""') .. '"'
    end
    if string.find(s, '[",\r\n]') then
      return '"' .. string.gsub(s, '"', '""') .. '"'
    end
    return s
  end

  -- Tabs and newlines would break the table layout: shown escaped.
  local function tsv_field(s)
    s = s or ''
    s = string.gsub(s, '\\', '\\\\')
    s = string.gsub(s, '\t', '\\t')
    s = string.gsub(s, '\n', '\\n')
    s = string.gsub(s, '\r', '\\r')
    return s
  end

  -- The history as JSON objects (docs/reference.md "History" entries) and the dropped count.
  local function export_history(m)
    local out = {}
    local h = m.history or {}
    for i = 1, #h do
      local e = h[i]
      if #e == 1 then
        out[i] = { replayed_at = iso_time(m.created_at + e[1]) }
      elseif is_snooze(e) then
        out[i] = { snoozed_at = iso_time(m.created_at + e[1]),
                   ['until'] = iso_time(m.created_at + e[6]) }
      else
        out[i] = { attempt = e[2], error = e[4], at = iso_time(m.created_at + e[1]),
                   lease_expired = e[3] % 2 == 1, worker = e[5] or cjson.null }
      end
    end
    if #out == 0 then out = nil end   -- cjson would write {}: the caller writes []
    return out, m.history_dropped or 0
  end

  local EXPORT_COLUMNS = { 'id', 'status', 'retry_count', 'max_retries', 'created_at',
                           'updated_at', 'retry_after', 'last_error', 'payload' }

  -- export: one page of messages as lines of text, for operators' tools.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  format                             "csv" | "jsonl" | "tsv"
  --   ARGV[2]  status                             as for list
  --   ARGV[3]  limit                              integer 1..1000
  --   ARGV[4]  cursor                             as for list
  -- csv: RFC 4180 rows of EXPORT_COLUMNS and history_count (the header is the
  -- caller's, see retryctl); jsonl: one JSON object per line with the same
  -- fields, history (the array as GET shows it) and history_dropped instead of
  -- the count; tsv: EXPORT_COLUMNS tab-separated with \t, \n, \r, \\ escaped. Pages like list:
  -- the same order and cursors, at most 1000 ids looked at per call, and a
  -- chunk stops before the line that would take it past REPLY_BYTES (at least
  -- one line), so a chunk may hold fewer than limit lines: follow next_cursor.
  -- Returns {next_cursor ("" at the end), line, ...} | {"bad_cursor"} as its only element.
  local function export(keys, args)
    local base = keys[1]
    local k = queue_keys(base)
    local format, status, limit, cursor = args[1], args[2] or '', to_int(args[3]), args[4] or ''
    if format ~= 'csv' and format ~= 'jsonl' and format ~= 'tsv' then return bad_arg('format') end
    if limit == nil or limit < 1 or limit > MAX_BATCH then return bad_arg('limit') end
    if not valid_status(status) then return bad_arg('status') end
    local out = { '' }
    local bytes = 0
    local function visit(id, section)
      local m = load_message(message_key(base, id))
      if not m then return 'skip' end   -- an orphan index entry
      local line
      do
        local row = { id, SECTION_STATUS[OLD_SECTIONS[section] or section], ms_text(m.retry_count),
                      ms_text(m.max_retries), iso_time(m.created_at), iso_time(m.updated_at),
                      iso_time(m.retry_after), m.last_error or '', m.payload }
        if format == 'jsonl' then
          local obj = {}
          for c = 1, #EXPORT_COLUMNS do obj[EXPORT_COLUMNS[c]] = row[c] end
          obj.id = tonumber(row[1])
          obj.retry_count = tonumber(row[3])
          obj.max_retries = tonumber(row[4])
          if obj.retry_after == '' then obj.retry_after = cjson.null end
          if not m.last_error then obj.last_error = cjson.null end
          obj.history, obj.history_dropped = export_history(m)
          if m.origin_queue then obj.origin = { queue = m.origin_queue, id = m.origin_id } end
          line = cjson.encode(obj)
          if not obj.history then line = string.sub(line, 1, -2) .. ',"history":[]}' end
        else
          local esc = format == 'csv' and csv_field or tsv_field
          for c = 1, #row do row[c] = esc(row[c]) end
          if format == 'csv' then
            row[#row + 1] = ms_text(#(m.history or {}) + (m.history_dropped or 0))
          end
          line = table.concat(row, format == 'csv' and ',' or '\t')
        end
      end
      if #out > 1 and bytes + #line > REPLY_BYTES then return 'full' end
      bytes = bytes + #line
      out[#out + 1] = line
      if #out - 1 >= limit then return 'last' end
      return 'take'
    end
    local next_cursor = walk(k, status, cursor, limit, visit)
    if not next_cursor then return { 'bad_cursor' } end
    out[1] = next_cursor
    return out
  end

  register('export', export, { 'no-writes' })
end
