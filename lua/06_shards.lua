-- A queue over several shards (docs/sharding.md): the layout on shard 0 and
-- the copies of the policy and layout on shards 1..N-1. The layout is the
-- HASH "<base>:shard" (flow.layout_key); on shard 0 it is the original, on
-- shard k a copy written only by policy_copy. Its fields:
--   rev       the layout's revision: max(old + 1, now ms) at every change, so
--             it grows across a drop and re-create too
--   salts     "s1,s2,...": the salt of shard 1, 2, ... (0-65535; a shard's
--             base is "<prefix>:{<q>:<k>.<salt>}", the salt placing it on a
--             master of its own in a cluster, 0 on one Redis)
--   hw        the most shards the queue ever had
--   from      the count before a raise that has not settled yet
--   keys      "N@until_ms,...": older counts whose idempotency keys may still
--             be live (at most 3), newest first
-- and a shard's own state, never copied: index (k), digest (the sha1 of the
-- policy copy as installed, flow.policy_digest), retired (a lowering fenced
-- the shard: it takes no placement).
local placement = {}
do
  local register, queue_keys, now_ms = common.register, common.queue_keys, common.now_ms
  local bad_arg, to_int, int_arg = common.bad_arg, common.to_int, common.int_arg
  local read_policy, layout_key, shard_count = flow.read_policy, flow.layout_key, flow.shard_count
  local policy_digest = flow.policy_digest

  local SHARDS_MAX = 64
  local SALT_MAX = 65535
  local KEYS_MAX = 3                -- older counts kept in `keys`
  local KEYS_WINDOW_MS = 86400000   -- an idempotency key lives at most 24 h
  local LOWERING_STALE_MS = 10000   -- a lowering begun this long ago is abandoned
  local COPIED = { 'rev', 'salts', 'hw', 'from', 'keys', 'lowering' }

  -- The layout HASH as a table field -> string.
  local function read_layout(k)
    local raw = redis.call('HGETALL', layout_key(k))
    local l = {}
    for i = 1, #raw, 2 do l[raw[i]] = raw[i + 1] end
    return l
  end

  local function flat(l)
    local out = {}
    for f, v in pairs(l) do out[#out + 1], out[#out + 2] = f, v end
    return out
  end

  -- The salts as a list of numbers, or nil when s is not "n,n,..." of
  -- integers 0..SALT_MAX.
  local function parse_salts(s)
    local out = {}
    if s == nil or s == '' then return out end
    for part in string.gmatch(s .. ',', '([^,]*),') do
      local n = to_int(part)
      if n == nil or n < 0 or n > SALT_MAX or part ~= string.format('%d', n) then return nil end
      out[#out + 1] = n
    end
    return out
  end

  -- The entries of `keys` still live at now, newest first.
  local function live_keys(s, now)
    local out = {}
    for n, till in string.gmatch(s or '', '(%d+)@(%d+)') do
      if tonumber(till) > now then out[#out + 1] = n .. '@' .. till end
    end
    return out
  end

  local function next_rev(l, now)
    return int_arg(math.max((tonumber(l.rev) or 0) + 1, now))
  end

  -- The counts "N@until" of `keys` live at now, with the count n of now
  -- first (live for 24 h), or nil when that makes more than KEYS_MAX.
  local function keys_with(l, n, now)
    local live = live_keys(l.keys, now)
    table.insert(live, 1, n .. '@' .. int_arg(now + KEYS_WINDOW_MS))
    if #live > KEYS_MAX then return nil end
    return table.concat(live, ',')
  end

  -- The lowering's steps on shard 0 (docs/sharding.md "Lower N -> M"):
  -- "lower_begin" M marks the layout `lowering` = M (no view places a message
  -- on a shard >= M from its rev on); "lower_abort" takes the mark back;
  -- "lower_commit" M sets `shards` to M (the field removed at 1, which
  -- absent means), with the count before in `keys`.
  local function lower(k, l, mode, m, now)
    local p = read_policy(k)
    local n = shard_count(p)
    local lkey = layout_key(k)
    if mode == 'lower_stale' then
      -- A lowering whose driver went away (a walk takes milliseconds; one
      -- begun LOWERING_STALE_MS ago is abandoned): the caller undoes it.
      if l.lowering == nil then return { 'ok' } end
      if now - (tonumber(l.lowering_at) or 0) < LOWERING_STALE_MS then return { 'settling' } end
      return { 'abandoned', l.lowering }
    end
    if mode == 'lower_abort' then
      if l.lowering == nil then return { 'ok', unpack(flat(l)) } end
      l.lowering, l.lowering_at, l.rev = nil, nil, next_rev(l, now)
      redis.call('HDEL', lkey, 'lowering', 'lowering_at')
      redis.call('HSET', lkey, 'rev', l.rev)
      return { 'ok', unpack(flat(l)) }
    end
    if mode == 'lower_begin' then
      if m == nil or m < 1 or m >= n then
        return { 'invalid', 'shards', string.format('must be less than %d and at least 1', n) }
      end
      if l.from or l.lowering or keys_with(l, n, now) == nil
         or redis.call('EXISTS', k.dropping) == 1 then
        return { 'settling' }
      end
      l.lowering, l.lowering_at, l.rev = int_arg(m), int_arg(now), next_rev(l, now)
      redis.call('HSET', lkey, 'lowering', l.lowering, 'lowering_at', l.lowering_at, 'rev', l.rev)
      return { 'ok', unpack(flat(l)) }
    end
    if l.lowering == nil or tonumber(l.lowering) ~= m then return { 'stale', l.rev or '0' } end
    local kept = keys_with(l, n, now)
    if kept == nil then return { 'settling' } end
    l.lowering, l.lowering_at, l.keys, l.rev = nil, nil, kept, next_rev(l, now)
    redis.call('HDEL', lkey, 'lowering', 'lowering_at')
    redis.call('HSET', lkey, 'keys', l.keys, 'rev', l.rev)
    if m == 1 then
      redis.call('HDEL', k.policy, 'shards')
    else
      redis.call('HSET', k.policy, 'shards', int_arg(m))
    end
    redis.call('HSET', k.policy, 'updated_at', int_arg(now))
    return { 'ok', unpack(flat(l)) }
  end

  -- shards_set: change how many shards a queue spreads over, on shard 0
  -- (docs/sharding.md "Changing shards on a live queue").
  --   KEYS[1]  <prefix>:{q}                       shard 0's base
  --   ARGV[1]  "raise": ARGV[2] M (more than the queue has, at most 64),
  --            ARGV[3] the salts of shards 1..M-1 ("s1,...", a shard the
  --            queue had before keeps its salt). Sets the policy's `shards`
  --            to M; in the layout `from` (the count before), `keys` (that
  --            count, live for 24 h), `hw`, the salts and a new `rev`.
  --            "close": ARGV[2] the rev the caller saw settled: `from` goes,
  --            with a new rev.
  --            "lower_begin" M, "lower_abort", "lower_commit" M: a lowering's
  --            steps (lower above; shard_retire checks and fences the shards
  --            between them); "lower_stale": {"abandoned", M} when a
  --            lowering to M was begun LOWERING_STALE_MS ago (its driver is
  --            gone: the caller undoes it), {"settling"} while younger,
  --            {"ok"} when none runs.
  -- Nothing moves: every message stays on its shard.
  -- Returns {"ok", layout field, value, ...} (the layout now), or
  -- {"settling"} (a raise has not settled, a lowering runs, or the change
  -- would need a fourth entry in `keys`), {"stale", rev} (close: the layout
  -- changed since; lower_commit: no lowering to M runs), {"limited",
  -- "shards", why} (raise: the policy has max_in_flight or rate_limit,
  -- flow.limit_across_shards), or {"invalid", field, why}: nothing changed.
  local function shards_set(keys, args)
    local k = queue_keys(keys[1])
    if k.shard ~= 0 then return bad_arg('base (shard 0 holds the layout)') end
    local mode = args[1]
    local now = now_ms()
    local l = read_layout(k)
    if mode == 'lower_begin' or mode == 'lower_abort' or mode == 'lower_commit'
       or mode == 'lower_stale' then
      return lower(k, l, mode, to_int(args[2]), now)
    end
    if mode == 'close' then
      if l.rev == nil or l.rev ~= args[2] then return { 'stale', l.rev or '0' } end
      if l.from == nil then return { 'ok', unpack(flat(l)) } end
      l.from = nil
      l.rev = next_rev(l, now)
      redis.call('HDEL', layout_key(k), 'from')
      redis.call('HSET', layout_key(k), 'rev', l.rev)
      return { 'ok', unpack(flat(l)) }
    end
    if mode ~= 'raise' then return bad_arg('mode') end
    local p = read_policy(k)
    local n, m = shard_count(p), to_int(args[2])
    if m == nil or m <= n or m > SHARDS_MAX then
      return { 'invalid', 'shards', string.format('must be more than %d and at most %d', n,
                                                  SHARDS_MAX) }
    end
    if l.from or l.lowering or redis.call('EXISTS', k.dropping) == 1 then return { 'settling' } end
    local limited = flow.limit_across_shards(p)
    if limited then return { 'limited', 'shards', limited } end
    local salts, old = parse_salts(args[3]), parse_salts(l.salts)
    if salts == nil or #salts ~= m - 1 then
      return { 'invalid', 'salts', string.format('must be %d integers 0-%d', m - 1, SALT_MAX) }
    end
    for i = 1, #old do
      if salts[i] ~= nil and salts[i] ~= old[i] then
        return { 'invalid', 'salts', string.format('shard %d keeps its salt %d', i, old[i]) }
      end
    end
    for i = #salts + 1, #old do salts[i] = old[i] end   -- a lowered-away shard's, for later
    local kept = keys_with(l, n, now)
    if kept == nil then return { 'settling' } end
    local salt_text = {}
    for i = 1, #salts do salt_text[i] = int_arg(salts[i]) end
    l.rev = next_rev(l, now)
    l.salts = table.concat(salt_text, ',')
    l.hw = int_arg(math.max(tonumber(l.hw) or 1, m))
    l.from = int_arg(n)
    l.keys = kept
    l.index = '0'
    redis.call('HSET', layout_key(k), 'rev', l.rev, 'salts', l.salts, 'hw', l.hw,
               'from', l.from, 'keys', l.keys, 'index', '0')
    redis.call('HSET', k.policy, 'shards', int_arg(m), 'updated_at', int_arg(now))
    if redis.call('HEXISTS', k.policy, 'created_at') == 0 then
      redis.call('HSET', k.policy, 'created_at', int_arg(now))
    end
    return { 'ok', unpack(flat(l)) }
  end

  -- policy_copy: install shard 0's policy and layout on shard k >= 1, as
  -- shard 0's policy_get read them (docs/sharding.md "Every API over all
  -- shards": a shard's functions read the policy of their own slot).
  --   KEYS[1]  <prefix>:{q:<k>.<salt>}            shard k's base
  --   ARGV[1]  rev                                the layout's rev of the copy
  --   ARGV[2..] field, value, ...                 policy_get's reply: the
  --                                               policy's pairs, then the
  --                                               layout's as "layout.<field>"
  -- A copy is installed only when its rev is not older than the shard's, and
  -- the shard is one of the copy's `shards`. The policy HASH is replaced
  -- whole; of the layout the copied fields (rev, salts, hw, from, keys,
  -- lowering) are replaced, the shard's own state kept, its digest set, a
  -- `retired` mark removed.
  -- Returns {"ok", rev}, {"stale", the shard's rev} or {"outside", shards}:
  -- nothing changed.
  local function policy_copy(keys, args)
    local k = queue_keys(keys[1])
    if k.shard == 0 then return bad_arg('base (a copy goes to a shard above 0)') end
    local rev = to_int(args[1])
    if rev == nil or rev < 1 or #args % 2 ~= 1 then return bad_arg('rev') end
    local own = redis.call('HMGET', layout_key(k), 'rev', 'retired')
    if own[1] and tonumber(own[1]) > rev then return { 'stale', own[1] } end
    -- A fenced shard takes only a copy newer than its fence: one read before
    -- the lowering (or during it) cannot open it again.
    if own[2] and tonumber(own[2]) >= rev then return { 'stale', own[2] } end
    local policy, layout = {}, {}
    local pairs_n = 0
    for i = 2, #args, 2 do
      local f, v = args[i], args[i + 1]
      local lf = string.match(f, '^layout%.(.*)$')
      if lf then layout[lf] = v else policy[f] = v; pairs_n = pairs_n + 1 end
    end
    if layout.rev ~= args[1] then return bad_arg('rev (not the copy\'s layout.rev)') end
    local n = shard_count(policy)
    if k.shard >= n then return { 'outside', int_arg(n) } end
    local lowering = tonumber(layout.lowering)
    if lowering and k.shard >= lowering then return { 'outside', layout.lowering } end
    redis.call('DEL', k.policy)
    if pairs_n > 0 then redis.call('HSET', k.policy, unpack(flat(policy))) end
    local lkey = layout_key(k)
    -- A shard within the copy's count takes placements (again, after a
    -- lowering retired it).
    redis.call('HDEL', lkey, 'retired', unpack(COPIED))
    local out = { 'index', int_arg(k.shard), 'digest', policy_digest(policy) }
    for i = 1, #COPIED do
      local v = layout[COPIED[i]]
      if v then out[#out + 1], out[#out + 2] = COPIED[i], v end
    end
    redis.call('HSET', lkey, unpack(out))
    k.flow_policy = nil
    return { 'ok', args[1] }
  end

  -- The indexes that hold a message in some state, and how many: every
  -- shard's own, and retryd_v2's generation (only shard 0 can have it).
  local function holdings(k)
    local lists = { 'due', 'ready' }
    local zsets = { 'priority', 'scheduled', 'processing', 'dead', 'succeeded', 'redriving',
                    'grouped' }
    local out = {}
    for i = 1, #lists do
      local n = redis.call('LLEN', k[lists[i]])
      if n > 0 then out[#out + 1], out[#out + 2] = lists[i], int_arg(n) end
    end
    for i = 1, #zsets do
      local n = redis.call('ZCARD', k[zsets[i]])
      if n > 0 then out[#out + 1], out[#out + 2] = zsets[i], int_arg(n) end
    end
    local base = k.base
    for _, name in ipairs({ 'due', 'ready' }) do
      local n = redis.call('LLEN', base .. ':' .. name)
      if n > 0 then out[#out + 1], out[#out + 2] = 'v2 ' .. name, int_arg(n) end
    end
    for _, name in ipairs({ 'scheduled', 'processing', 'dead', 'succeeded' }) do
      local n = redis.call('ZCARD', base .. ':' .. name)
      if n > 0 then out[#out + 1], out[#out + 2] = 'v2 ' .. name, int_arg(n) end
    end
    return out
  end

  -- shard_retire: a lowering's check of one shard, and its fence (docs/
  -- sharding.md "Lower N -> M"), in one call so that no message can land
  -- between them.
  --   KEYS[1]  the shard's base (shard 0's for a check only)
  --   ARGV[1]  "check": only whether it holds a message; "retire": that, and
  --            if it holds none the shard is marked retired with ARGV[2],
  --            the lowering's rev (placement there is refused from then on,
  --            and a copy not newer than it is not installed); "unretire":
  --            the mark goes
  -- Returns {"ok"} or {"not_empty", index, count, ...} (nothing marked).
  local function shard_retire(keys, args)
    local k = queue_keys(keys[1])
    local mode = args[1]
    if mode == 'unretire' then
      redis.call('HDEL', layout_key(k), 'retired')
      return { 'ok' }
    end
    if mode ~= 'check' and mode ~= 'retire' then return bad_arg('mode') end
    if mode == 'retire' and k.shard == 0 then return bad_arg('base (shard 0 is never retired)') end
    local held = holdings(k)
    if #held > 0 then return { 'not_empty', unpack(held) } end
    if mode == 'retire' then
      local rev = to_int(args[2])
      if rev == nil or rev < 1 then return bad_arg('rev') end
      redis.call('HSET', layout_key(k), 'retired', int_arg(rev))
    end
    return { 'ok' }
  end

  -- Whether a call may place a message on k's shard (docs/sharding.md
  -- "Where shards is read"): nil when it may, else the reply that refuses
  -- it, nothing written. rev: the layout's rev the caller's view holds (nil:
  -- it has no view, the queue is one shard to it); sensitive: the call
  -- places by group or idempotency key, which only the right shard may take.
  --   {"reshard"}  the caller's view is older than the shard's layout, or it
  --                has none of a sharded queue, or the shard is retired or
  --                outside the count: the caller reads the layout on shard 0
  --                and places again
  --   {"copy"}     the caller's view is newer than this shard's copy: the
  --                caller copies shard 0's policy here and sends again
  -- It reads the policy (as most enqueues do anyway, for their defaults); a
  -- 1-shard queue's call without a view reads nothing more. A call without a
  -- view on a shard above 0 (a script's) is refused only by a retired shard
  -- or one outside the count when it is ungrouped and unkeyed.
  function placement.refusal(k, rev, sensitive)
    if rev ~= nil and (to_int(rev) == nil or to_int(rev) < 1) then return bad_arg('rev') end
    local n = shard_count(read_policy(k))
    if k.shard == 0 and rev == nil and n <= 1 then return nil end
    local l = redis.call('HMGET', layout_key(k), 'rev', 'retired')
    if l[2] or k.shard >= n then return { 'reshard' } end
    if rev == nil then
      if k.shard ~= 0 and not sensitive then return nil end
      return { 'reshard' }
    end
    local own, r = tonumber(l[1]) or 0, tonumber(rev)
    if r < own or (r > own and k.shard == 0) then return { 'reshard' } end
    if r > own then return { 'copy' } end
    return nil
  end

  -- The hash of docs/sharding.md "Enqueue: which shard", exactly as
  -- src/shards.c computes it: 32-bit FNV-1a over the bytes, and Lamping and
  -- Veach's jump hash stirred by FNV steps. In doubles every step is exact:
  -- x * 16777619 mod 2^32 is x * 403 + (x mod 256) * 2^24 (16777619 is
  -- 2^24 + 403), below 2^42; bit.bxor answers a signed 32-bit number, taken
  -- back mod 2^32.
  -- (bit, like string, is reached at call time: the load-time code cannot.)
  local TWO32 = 4294967296
  local function fnv_step(x)
    return (x * 403 + (x % 256) * 16777216) % TWO32
  end

  function placement.fnv(s)
    local bxor = bit.bxor
    local h = 2166136261
    for i = 1, #s do h = fnv_step(bxor(h, string.byte(s, i)) % TWO32) end
    return h
  end

  function placement.jump(x, n)
    local bxor = bit.bxor
    local b, j = -1, 0
    while j < n do
      b = j
      x = fnv_step(bxor(x, 0xA5) % TWO32)
      j = math.floor((b + 1) * TWO32 / (x + 1))
    end
    return b
  end

  -- shard_pick: where a group or key goes (operators and retryctl ask it).
  --   KEYS[1]  <prefix>:{q}                       any queue base (for the cluster's slot)
  --   ARGV[1]  the group or key (bytes)
  --   ARGV[2]  n                                  1..64
  -- Returns {fnv, shard for 1 shard, ..., shard for n shards}.
  local function shard_pick(keys, args)
    local n = to_int(args[2])
    if args[1] == nil or n == nil or n < 1 or n > SHARDS_MAX then return bad_arg('n') end
    local h = placement.fnv(args[1])
    local out = { h }
    for i = 1, n do out[i + 1] = placement.jump(h, i) end
    return out
  end

  -- A listing's page (list, groups) reads one shard: refused only when the
  -- caller's view is wrong for it ({"reshard"}: an older rev, none on a
  -- sharded queue's shard 0, a retired shard or one outside the count), so
  -- that a daemon never pages a sharded queue as one shard. A script that
  -- names a shard above 0 knows the queue is sharded: it needs no rev. A
  -- lagging copy ({"copy"}) does not matter to a read.
  function placement.read_refusal(k, rev)
    if rev == '' then rev = nil end
    local refused = placement.refusal(k, rev, false)
    if refused and (refused.err or refused[1] == 'reshard') then return refused end   -- err: a bad rev
    return nil
  end
  groups.read_refusal = placement.read_refusal   -- 01_groups.lua loads before this file

  -- Whether a message of group g may be made present on this shard by a
  -- call that does not place it (a replay in place, a redrive's letter):
  -- the queue is not sharded, or the group is present here, or this is its
  -- shard under the count and, while a raise settles, under the count
  -- before it too (else the group may be present on another shard, and one
  -- call cannot look: docs/sharding.md "A group keeps its shard").
  function placement.group_here(k, g)
    local n = shard_count(read_policy(k))
    if n <= 1 then return true end
    if redis.call('ZSCORE', k.group_names, g) then return true end
    local h = placement.fnv(g)
    if placement.jump(h, n) ~= k.shard then return false end
    local from = tonumber(redis.call('HGET', layout_key(k), 'from'))
    return from == nil or placement.jump(h, from) == k.shard
  end
  lifecycle.group_here = placement.group_here   -- 04_lifecycle.lua loads before this file

  register('shard_pick', shard_pick, { 'no-writes' })
  register('shards_set', shards_set)
  -- shard_scan: one step of an old shard's walk after a raise
  -- (docs/sharding.md "When the raise settles").
  --   KEYS[1]  <prefix>:{q} or a shard's base     a shard below the raise's `from`
  --   ARGV[1]  rev                                the layout's rev as the caller knows it
  -- Walks the shard's groups by name, at most SCAN_NAMES a call or
  -- SCAN_BYTES of names, and puts each one whose shard under the new count
  -- is another into `strays` (groups.gone_if_empty takes it out as it
  -- empties). The walk's place is the layout's scan_at (with scan_rev), its
  -- end scanned = rev: no group becomes a stray after the walk starts
  -- (an absent group is enqueued on its new shard).
  -- Returns {"done", strays} (the walk is over: how many strays are left, as
  -- text like every field of these replies;
  -- also on a shard at or above `from`, and when no raise settles), {"more",
  -- strays} (call again), or {"stale", rev} (the layout has another rev:
  -- read it again).
  local SCAN_NAMES, SCAN_BYTES = 100, 6144
  local function shard_scan(keys, args)
    local k = queue_keys(keys[1])
    local l = read_layout(k)
    if l.rev == nil or l.rev ~= args[1] then return { 'stale', l.rev or '0' } end
    local from = tonumber(l.from)
    if from == nil or k.shard >= from then return { 'done', '0' } end
    if l.scanned == l.rev then
      -- A stray whose group is gone without gone_if_empty (a purge cut short,
      -- a Lua state that cached "no strays" across a failover, an older
      -- library's settlement) would hold the raise forever: up to
      -- SCAN_NAMES of them are looked at again each call.
      local some = redis.call('SRANDMEMBER', k.strays, SCAN_NAMES)
      for i = 1, #some do
        if not redis.call('ZSCORE', k.group_names, some[i]) then
          redis.call('SREM', k.strays, some[i])
        end
      end
      return { 'done', int_arg(redis.call('SCARD', k.strays)) }
    end
    local n = shard_count(read_policy(k))
    local cursor = l.scan_rev == l.rev and l.scan_at or ''
    local names = redis.call('ZRANGE', k.group_names, cursor == '' and '-' or '(' .. cursor, '+',
                             'BYLEX', 'LIMIT', '0', int_arg(SCAN_NAMES))
    local bytes, last, ended = 0, nil, #names < SCAN_NAMES
    for i = 1, #names do
      local g = names[i]
      if placement.jump(placement.fnv(g), n) ~= k.shard then
        redis.call('SADD', k.strays, g)
        k.known.strays = true
      end
      last, bytes = g, bytes + #g
      if bytes >= SCAN_BYTES and i < #names then   -- the rest in the next call
        ended = false
        break
      end
    end
    if ended then
      redis.call('HSET', layout_key(k), 'scanned', l.rev)
      redis.call('HDEL', layout_key(k), 'scan_at', 'scan_rev')
      return { 'done', int_arg(redis.call('SCARD', k.strays)) }
    end
    redis.call('HSET', layout_key(k), 'scan_at', last, 'scan_rev', l.rev)
    return { 'more', int_arg(redis.call('SCARD', k.strays)) }
  end

  register('shard_retire', shard_retire)
  register('shard_scan', shard_scan)
  register('policy_copy', policy_copy)
end
