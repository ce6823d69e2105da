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
for id = last - n + 1, last do
  local at = now - (last - id)
  redis.call('HSET', base .. ':m:' .. id, 'payload', payload, 'status', 'dead',
             'retry_count', 3, 'max_retries', 3, 'created_at', at, 'updated_at', at,
             'last_error', err, 'dead_at', at)
  redis.call('ZADD', base .. ':dead', at, id)
end
redis.call('ZINCRBY', base .. ':errors', n, err)
redis.call('HINCRBY', base .. ':stats', 'dead', n)
return last
