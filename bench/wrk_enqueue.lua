-- wrk_enqueue.lua - the independent check of `make bench`'s enqueue figure
-- (section 3e, docs/benchmarks.md): wrk POSTs the same JSON body loadgen
-- sends, {"payload":"<B bytes>"} (B = 100 unless given), to the URL it is given:
--
--   wrk -t1 -c50 -d3s -s bench/wrk_enqueue.lua http://127.0.0.1:PORT/queues/Q/messages [-- B]
--
-- and prints one key=value line when it ends, which scripts/bench.sh reads:
--   wrk requests=N duration_us=D non2xx=K socket_errors=E p50_us=A p99_us=B
local alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

function init(args)
  local bytes = tonumber(args[1] or "100")
  local payload = string.rep(alphabet, math.ceil(bytes / #alphabet)):sub(1, bytes)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = '{"payload":"' .. payload .. '"}'
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("wrk requests=%d duration_us=%d non2xx=%d socket_errors=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
