#!lua name=retryd_bench_costs
-- lua_costs.lua - for bench/callgrind_claim.sh only: what pieces of Lua cost
-- inside a Redis function, in redis-server's instructions, so a change to
-- the library can be priced before it is made (docs/benchmarks.md
-- "Instructions per call"). Each function does one thing ten
-- times (cost_nothing: the FCALL alone) and returns 1.
--   KEYS[1]  any key (never written)
local function cost_nothing(keys, args)
  return 1
end

local function cost_one_call(keys, args)   -- one command with ten keys
  local k = keys[1]
  redis.call('EXISTS', k, k, k, k, k, k, k, k, k, k)
  return 1
end

local function cost_ten_calls(keys, args)   -- ten commands
  for _ = 1, 10 do redis.call('EXISTS', keys[1]) end
  return 1
end

local function cost_ten_formats(keys, args)   -- ten string.format('%d')
  local t = {}
  for i = 1, 10 do t[i] = string.format('%d', 1796155777876 + i) end
  return 1
end

local function cost_ten_tables(keys, args)   -- ten tables of six fields
  local t = {}
  for i = 1, 10 do t[i] = { a = i, b = 2, c = 3, d = 4, e = 5, f = 6 } end
  return 1
end

local function cost_ten_number_args(keys, args)   -- a number argument, ten times
  for i = 1, 10 do redis.call('EXISTS', keys[1], 1796155777876 + i) end
  return 1
end

redis.register_function('cost_nothing', cost_nothing)
redis.register_function('cost_one_call', cost_one_call)
redis.register_function('cost_ten_calls', cost_ten_calls)
redis.register_function('cost_ten_formats', cost_ten_formats)
redis.register_function('cost_ten_tables', cost_ten_tables)
redis.register_function('cost_ten_number_args', cost_ten_number_args)
