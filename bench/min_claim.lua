#!lua name=retryd_bench
-- min_claim.lua - the floor of a claim, for `make bench` only: the
-- three commands any claim must run (pop an id, mark its hash, index the
-- lease), on retryd's own key layout, and nothing else: no TIME, no promotion
-- of due retries, no lease token, no counters, no message in the reply.
-- The ratio claim / min_claim is what retryd's extra work costs. Its queue
-- holds message HASHes as retryd_v2 wrote them (bench.sh fill_minclaim), the
-- layout it has been measured on since issue 5; retryd_v3 keeps a record
-- STRING instead (docs/storage.md).
--
-- min_claim: lease the oldest ready id.
--   KEYS[1]  <prefix>:{q}                       queue key base (as retryd's)
--   ARGV[1]  lease deadline                     epoch ms, stored as given
-- Returns the id, or nil when the ready list is empty.
redis.register_function('min_claim', function(keys, args)
  local id = redis.call('RPOP', keys[1] .. ':ready')
  if not id then return nil end
  redis.call('HSET', keys[1] .. ':m:' .. id, 'status', 'processing', 'lease_expires_at', args[1])
  redis.call('ZADD', keys[1] .. ':processing', args[1], id)
  return id
end)
