-- Per-queue time series (docs/series.md): enqueued, succeeded, failed, dead
-- and replayed per minute for the last 2 hours and per hour for the last 8
-- days. No function of the message lifecycle writes them: a series is a
-- SAMPLE of the lifetime counters of the queue's stats hash, taken by tick
-- (the timer's call) and by `series` (the reader) before it answers. The
-- deltas since the previous sample go to the buckets of the time between the
-- two samples.
--
-- One STRING per queue, "<base>:series" (spelled here, not in queue_keys, so
-- the hot functions do not build its name), packed with `struct`:
--   header   6 doubles: at (ms of the last sample), then the five counters
--            as that sample saw them
--   minute   SERIES_RES.minute.len buckets of 5 uint32, bucket b (minute
--            b = floor(ms / 60000) since the epoch) at slot b % len
--   hour     the same for hours
-- Buckets after the last sample's and before now are zero: a sample zeroes
-- the slots it moves past. The key expires SERIES_TTL_MS after the last
-- sample (by then every bucket of it is out of both windows).
local timeseries = {}
do
  local bad_arg, now_ms, queue_keys = common.bad_arg, common.now_ms, common.queue_keys
  local register = common.register

  local SERIES_COUNTERS = { 'enqueued', 'succeeded', 'failed', 'dead', 'replayed' }
  local SERIES_HEADER = 48
  local SERIES_BUCKET = 20
  local SERIES_RES = {
    minute = { step = 60000, len = 120, offset = SERIES_HEADER },
    hour = { step = 3600000, len = 192, offset = SERIES_HEADER + 120 * SERIES_BUCKET },
  }
  local SERIES_BYTES = SERIES_HEADER + (120 + 192) * SERIES_BUCKET
  local SERIES_TTL_MS = (192 + 1) * 3600000
  local SERIES_U32_MAX = 4294967295
  -- A tick that sampled some activity asks to be ticked again within this long,
  -- so an active queue is sampled about once a minute; the first tick that
  -- finds nothing new asks for nothing (an idle queue costs nothing).
  local SERIES_TICK_MS = 60000

  local function series_key(base)
    return base .. ':series'
  end

  -- The series of a new queue (enqueue of id 1): every counter zero as of now,
  -- so the queue's first minute is in the series. NX: never resets one.
  local function series_start(base, now)
    redis.call('SET', series_key(base),
               struct.pack('<dddddd', now, 0, 0, 0, 0, 0)
                 .. string.rep('\0', SERIES_BYTES - SERIES_HEADER),
               'NX', 'PX', SERIES_TTL_MS)
  end

  local function series_pack(v)
    return struct.pack('<I4I4I4I4I4', v[1], v[2], v[3], v[4], v[5])
  end

  -- Adds deltas d (five counts that happened in (from, now]) to one ring.
  -- They are spread over the buckets of that time in proportion to how much
  -- of it each bucket covers (as if at an even rate); the bucket of `from`
  -- keeps what it had, the later ones start from zero. Only the buckets still
  -- in the ring's window are written.
  local function series_spread(key, res, from, now, d)
    local step, len, offset = res.step, res.len, res.offset
    local first_b = math.floor(from / step)
    local last_b = math.floor(now / step)
    local any = d[1] + d[2] + d[3] + d[4] + d[5] > 0
    if last_b <= first_b and not any then return end
    if last_b < first_b then last_b = first_b end   -- TIME went back: the last bucket
    local lo = math.max(first_b, last_b - len + 1)
    local span = now - from
    -- cum(t): how many of d happened in (from, t] (all at `now` when the two
    -- samples share their millisecond).
    local function cum(i, t)
      if t <= from then return 0 end
      if t >= now then return d[i] end
      return math.floor(d[i] * (t - from) / span)
    end
    local parts = {}
    for b = lo, last_b do
      local v = { 0, 0, 0, 0, 0 }
      if b == first_b then
        local at = offset + (b % len) * SERIES_BUCKET
        local old = redis.call('GETRANGE', key, at, at + SERIES_BUCKET - 1)
        if #old == SERIES_BUCKET then v = { struct.unpack('<I4I4I4I4I4', old) } end
      end
      if any then
        for i = 1, 5 do
          local n = v[i] + cum(i, (b + 1) * step) - cum(i, b * step)
          v[i] = math.min(n, SERIES_U32_MAX)
        end
      end
      parts[#parts + 1] = series_pack(v)
      -- The ring wraps after slot len - 1: write what came so far, go on at 0.
      if b % len == len - 1 or b == last_b then
        local start = b - #parts + 1
        redis.call('SETRANGE', key, offset + (start % len) * SERIES_BUCKET, table.concat(parts))
        parts = {}
      end
    end
  end

  -- Samples the queue's counters into its series. Returns true when something
  -- happened since the previous sample. A queue without counters gets no
  -- series; one without a series (created before series existed, or expired)
  -- starts one: its counters so far belong to no bucket. A counter that went
  -- down (the stats hash was deleted) counts nothing and starts over.
  local function series_sample(base, stats_key, now)
    local key = series_key(base)
    local got = redis.call('HMGET', stats_key, unpack(SERIES_COUNTERS))
    local cur = {}
    for i = 1, 5 do cur[i] = tonumber(got[i]) or 0 end
    local hdr = redis.call('GETRANGE', key, 0, SERIES_HEADER - 1)
    if #hdr < SERIES_HEADER then
      if got[1] == false and got[2] == false and got[3] == false and got[4] == false
         and got[5] == false then
        return false
      end
      redis.call('SET', key, struct.pack('<dddddd', now, cur[1], cur[2], cur[3], cur[4], cur[5])
                   .. string.rep('\0', SERIES_BYTES - SERIES_HEADER), 'PX', SERIES_TTL_MS)
      return false
    end
    local prev = { struct.unpack('<dddddd', hdr) }
    local from = prev[1]
    local d = {}
    local any = false
    for i = 1, 5 do
      d[i] = math.max(0, cur[i] - prev[i + 1])
      if d[i] > 0 then any = true end
    end
    if now < from then now = from end
    series_spread(key, SERIES_RES.minute, from, now, d)
    series_spread(key, SERIES_RES.hour, from, now, d)
    redis.call('SETRANGE', key, 0, struct.pack('<dddddd', now, cur[1], cur[2], cur[3], cur[4], cur[5]))
    if any or math.floor(now / 60000) ~= math.floor(from / 60000) then
      redis.call('PEXPIRE', key, SERIES_TTL_MS)
    end
    return any
  end

  -- series: samples the queue, then answers one ring, oldest bucket first.
  --   KEYS[1]  <prefix>:{q}                       queue key base
  --   ARGV[1]  "minute" | "hour"
  -- Returns {start_ms, step_ms, enqueued, succeeded, failed, dead, replayed}:
  -- start_ms is the start of the oldest bucket, the last one is the current
  -- minute (hour); each series is an array of len integers (120 minutes, 192
  -- hours), all zero for a queue that has no series.
  local function series(keys, args)
    local base = keys[1]
    local res = SERIES_RES[args[1] or '']
    if res == nil then return bad_arg('resolution') end
    local now = now_ms()
    series_sample(base, queue_keys(base).stats, now)
    local key = series_key(base)
    local hdr = redis.call('GETRANGE', key, 0, SERIES_HEADER - 1)
    local ring = redis.call('GETRANGE', key, res.offset, res.offset + res.len * SERIES_BUCKET - 1)
    local last_b = math.floor(now / res.step)
    if #hdr == SERIES_HEADER then
      -- The last sample may be later than this call's TIME (TIME went back).
      local at = struct.unpack('<d', hdr)
      last_b = math.max(last_b, math.floor(at / res.step))
    end
    local out = { (last_b - res.len + 1) * res.step, res.step }
    local cols = { {}, {}, {}, {}, {} }
    -- The whole ring in one unpack: slot s, series i at v[s * 5 + i].
    local v = {}
    if #ring == res.len * SERIES_BUCKET then
      v = { struct.unpack('<' .. string.rep('I4', 5 * res.len), ring) }
    end
    for b = last_b - res.len + 1, last_b do
      local at = (b % res.len) * 5
      for i = 1, 5 do cols[i][#cols[i] + 1] = v[at + i] or 0 end
    end
    for i = 1, 5 do out[#out + 1] = cols[i] end
    return out
  end

  register('series', series)

  timeseries.series_start = series_start
  timeseries.series_sample = series_sample
  timeseries.SERIES_TICK_MS = SERIES_TICK_MS
  timeseries.series_key = series_key   -- drop_queue deletes it (46_drop.lua)
end
