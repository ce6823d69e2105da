-- populate_dead.lua - bench-only setup for `make bench`: creates
-- dead letters straight in retryd's key layout, as `fail` leaves them after
-- the last retry, so the growth section can page through a million of them
-- without a million claims and failures first. Run with EVAL (a script can
-- not FCALL the library); never used outside the benchmark.
--   KEYS[1]  <prefix>:{q}                       queue key base
--   ARGV[1]  count                              dead letters to add (ids from :seq)
--   ARGV[2]  payload
--   ARGV[3]  last_error
-- Returns the last id created.
local base, n, payload, err = KEYS[1], tonumber(ARGV[1]), ARGV[2], ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('INCRBY', base .. ':seq', n)
-- One death per millisecond, the newest now: distinct scores, as in real life.
-- The record of docs/storage.md: 24-byte header, payload, trailer {e = error}.
local trailer = cmsgpack.pack({ e = err })
trailer = trailer .. struct.pack('>I4', #trailer)
for id = last - n + 1, last do
  local at = now - (last - id)
  redis.call('SET', base .. ':m:' .. id,
             struct.pack('>BBBI6i5i5I5', 0x81, 3, 3, at, 0, 0, 0) .. payload .. trailer)
  redis.call('ZADD', base .. ':3:dead', at, id)
end
redis.call('ZINCRBY', base .. ':errors', n, err)
redis.call('HINCRBY', base .. ':stats', 'dead', n)
return last
