-- fabric's own Valkey Functions, a library separate from flowfabric so a
-- FlowFabric client sees exactly FlowFabric's function surface. Replies
-- follow the flowfabric convention: {1, status, ...} / {0, code, ...}.

local fab = {}

function fab.ok(...) return {1, 'OK', ...} end
function fab.err(code, ...) return {0, code, ...} end

-- fab.num_str is tostring(n) for a number, cheaper: an integer of at
-- most 14 digits is formatted with %d (what tostring's %.14g prints for
-- it); anything else goes to tostring itself.
function fab.num_str(n)
  if n % 1 == 0 and n < 1e14 and n > -1e14 and (n ~= 0 or 1 / n > 0) then
    return string.format('%d', n)
  end
  return tostring(n)
end

-- fab.score_arg is n as a redis.call argument: the %d string for an
-- integer of at most 14 digits (what redis.call's own %.17g formatting of
-- a number argument gives), else n itself, formatted by redis.call.
function fab.score_arg(n)
  if n % 1 == 0 and n < 1e14 and n > -1e14 and (n ~= 0 or 1 / n > 0) then
    return string.format('%d', n)
  end
  return n
end

-- fab.tag_of returns the {fp:N} hash tag an execution id starts with.
function fab.tag_of(eid)
  return string.match(eid or '', '^({fp:%d+})')
end

function fab.del_chunks(keys)
  local n = 0
  local i = 1
  while i <= #keys do
    local j = math.min(i + 499, #keys)
    n = n + redis.call('DEL', unpack(keys, i, j))
    i = j + 1
  end
  return n
end

redis.register_function('fabric_version', function(keys, args) return '7' end)

-- fabric_purge_execution deletes one terminal execution past its retention,
-- atomically (FlowFabric's retention_trimmer deletes in chunks from the
-- engine, so a crash halfway leaves a partial execution).
--   KEYS[1] exec core  KEYS[2] lane terminal zset  KEYS[3] all_executions
--   ARGV[1] execution id  ARGV[2] now_ms  ARGV[3] default retention ms
-- Replies: ok('purged', deleted_key_count) | ok('not_yet', due_at_ms) |
--   ok('gone') (core missing: index entries dropped) |
--   ok('not_terminal') (stale terminal entry dropped) |
--   ok('no_completed_at') (entry dropped, as FlowFabric does) |
--   err('invalid_input', what)
redis.register_function('fabric_purge_execution', function(keys, args)
  local core, terminal, all = keys[1], keys[2], keys[3]
  local eid = args[1]
  local now = tonumber(args[2] or '')
  local default_ret = tonumber(args[3] or '')
  local tag = fab.tag_of(eid)
  if not core or not terminal or not all then return fab.err('invalid_input', 'keys') end
  if not tag then return fab.err('invalid_input', 'execution_id') end
  if not now then return fab.err('invalid_input', 'now_ms') end
  if not default_ret then return fab.err('invalid_input', 'default_retention_ms') end
  if redis.call('EXISTS', core) == 0 then
    redis.call('ZREM', terminal, eid)
    redis.call('SREM', all, eid)
    return fab.ok('gone')
  end
  local f = redis.call('HMGET', core, 'lifecycle_phase', 'completed_at', 'total_attempt_count')
  if f[1] ~= 'terminal' then
    redis.call('ZREM', terminal, eid)
    return fab.ok('not_terminal')
  end
  local completed = tonumber(f[2] or '') or 0
  if completed <= 0 then
    redis.call('ZREM', terminal, eid)
    return fab.ok('no_completed_at')
  end
  local x = 'ff:exec:' .. tag .. ':' .. eid .. ':'
  local retention = default_ret
  local pj = redis.call('GET', x .. 'policy')
  if pj and pj ~= '' then
    local okd, pol = pcall(cjson.decode, pj)
    if okd and type(pol) == 'table' and type(pol.stream_policy) == 'table' then
      local r = tonumber(pol.stream_policy.retention_ttl_ms)
      if r and r >= 0 then retention = r end
    end
  end
  if now < completed + retention then
    return fab.ok('not_yet', tostring(math.floor(completed + retention)))
  end
  local del = {x .. 'payload', x .. 'result', x .. 'tags', x .. 'lease:current', x .. 'lease:history',
    x .. 'claim_grant', x .. 'attempts', x .. 'suspension:current',
    x .. 'suspension:current:satisfied_set', x .. 'suspension:current:member_map'}
  local attempts = tonumber(f[3] or '') or 0
  for i = 0, attempts - 1 do
    local a = 'ff:attempt:' .. tag .. ':' .. eid .. ':' .. i
    local s = 'ff:stream:' .. tag .. ':' .. eid .. ':' .. i
    table.insert(del, a)
    table.insert(del, a .. ':usage')
    table.insert(del, a .. ':policy')
    table.insert(del, a .. ':summary')
    table.insert(del, s)
    table.insert(del, s .. ':meta')
  end
  for _, edge in ipairs(redis.call('SMEMBERS', x .. 'deps:all_edges')) do
    table.insert(del, x .. 'dep:' .. edge)
  end
  table.insert(del, x .. 'deps:meta')
  table.insert(del, x .. 'deps:unresolved')
  table.insert(del, x .. 'deps:all_edges')
  for _, wp in ipairs(redis.call('SMEMBERS', x .. 'waitpoints')) do
    local w = 'ff:wp:' .. tag .. ':' .. wp
    table.insert(del, w)
    table.insert(del, w .. ':signals')
    table.insert(del, w .. ':condition')
  end
  table.insert(del, x .. 'waitpoints')
  for _, sig in ipairs(redis.call('ZRANGE', x .. 'signals', 0, -1)) do
    table.insert(del, 'ff:signal:' .. tag .. ':' .. sig)
    table.insert(del, 'ff:signal:' .. tag .. ':' .. sig .. ':payload')
  end
  table.insert(del, x .. 'signals')
  table.insert(del, core)
  table.insert(del, x .. 'policy')
  local n = fab.del_chunks(del)
  redis.call('ZREM', terminal, eid)
  redis.call('SREM', all, eid)
  return fab.ok('purged', tostring(n))
end)

-- fabric_clear_pending_waitpoint drops a pending-waitpoint expiry entry
-- whose waitpoint hash is gone or already closed/expired
-- (ff_close_waitpoint leaves those entries in place).
--   KEYS[1] waitpoint hash  KEYS[2] pending_waitpoint_expiry zset
--   ARGV[1] waitpoint id
-- Replies: ok('cleared') | ok('kept') | err('invalid_input', what)
redis.register_function('fabric_clear_pending_waitpoint', function(keys, args)
  local wp, idx, id = keys[1], keys[2], args[1]
  if not wp or not idx then return fab.err('invalid_input', 'keys') end
  if not id or id == '' then return fab.err('invalid_input', 'waitpoint_id') end
  local state = redis.call('HGET', wp, 'state')
  if not state or state == 'closed' or state == 'expired' then
    redis.call('ZREM', idx, id)
    return fab.ok('cleared')
  end
  return fab.ok('kept')
end)

-- The lane indexes of one lane, in the order fabric_reconcile_execution_index
-- takes them as KEYS[3..12].
fab.LANE_INDEXES = {'eligible', 'delayed', 'active', 'suspended', 'terminal',
  'blocked:dependencies', 'blocked:budget', 'blocked:quota', 'blocked:route', 'blocked:operator'}

-- Runnable eligibility states and the lane index each one lives in.
fab.RUNNABLE_INDEX = {
  eligible_now = 'eligible',
  not_eligible_until_time = 'delayed',
  blocked_by_dependencies = 'blocked:dependencies',
  blocked_by_budget = 'blocked:budget',
  blocked_by_quota = 'blocked:quota',
  blocked_by_route = 'blocked:route',
  blocked_by_operator = 'blocked:operator',
}

-- flowfabric's constants (lua/helpers.lua): the priority weight of the
-- eligible score and the lane:suspended score of a suspension without a
-- timeout.
fab.PRIORITY_FACTOR = 1000000000000
fab.SUSPENDED_NO_TIMEOUT = 9999999999999

fab.EXEC_ID = '^({fp:%d+}):%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$'

function fab.score_str(n)
  return string.format('%.17g', n)
end

-- fab.lane_score returns the lane index and score an execution's core
-- belongs in, as the flowfabric functions write them, and whether that
-- score follows from the core alone (then a different score is wrong).
-- Where the score records a moment the core no longer holds, the score
-- already in the index is kept (current), else the closest record is used:
--   active: the lease expiry at claim/reclaim (ff_renew_lease moves only
--     lease_expiry), else lease_expires_at;
--   delayed: delay_until; a resume delay (ff_deliver_signal /
--     ff_resume_execution) scores now+delay without writing delay_until,
--     so then the current score, else last_transition_at;
--   suspended: the suspension's timeout_at, else 9999999999999; an
--     escalated timeout clears timeout_at and keeps the score, so the
--     current score wins;
--   blocked:budget|quota|route|operator: the time of the block, else
--     last_transition_at.
-- Returns nil when the state has no lane index (e.g. submitted, or
-- runnable blocked_by_lane_state).
function fab.lane_score(c, suspension_key, current)
  local phase = c.lifecycle_phase
  if phase == 'runnable' then
    local kind = fab.RUNNABLE_INDEX[c.eligibility_state or '']
    if not kind then return nil end
    if kind == 'eligible' then
      -- helpers.lua eligible_score: -(priority * 1e12) + created_at
      return kind, -((tonumber(c.priority) or 0) * fab.PRIORITY_FACTOR) + (tonumber(c.created_at) or 0), true
    end
    if kind == 'blocked:dependencies' then
      return kind, tonumber(c.created_at) or 0, true
    end
    if kind == 'delayed' then
      local at = tonumber(c.delay_until or '')
      if at then return kind, at, true end
    end
    return kind, current[kind] or tonumber(c.last_transition_at or '') or 0, false
  elseif phase == 'active' then
    local own = c.ownership_state
    if own == 'unowned' or not own or own == '' then return nil end
    local at = current.active or tonumber(c.lease_expires_at or '')
    if not at then return nil end
    return 'active', at, false
  elseif phase == 'suspended' then
    if current.suspended then return 'suspended', current.suspended, false end
    local at = tonumber(redis.call('HGET', suspension_key, 'timeout_at') or '')
    return 'suspended', at or fab.SUSPENDED_NO_TIMEOUT, false
  elseif phase == 'terminal' then
    local at = tonumber(c.completed_at or '')
    if at then return 'terminal', at, true end
    return 'terminal', current.terminal or tonumber(c.last_transition_at or '') or 0, false
  end
  return nil
end

-- fabric_reconcile_execution_index puts one execution back in the one
-- lane index its core state says it belongs in, with the score the
-- flowfabric functions give it there, and takes it out of every other
-- index of its lane, atomically (FlowFabric's index_reconciler only logs
-- what is wrong). A missing core is left alone: nothing is written.
--   KEYS[1] exec core  KEYS[2] suspension:current
--   KEYS[3..12] the lanes indexes of ARGV[2]: eligible, delayed, active,
--     suspended, terminal, blocked:dependencies, blocked:budget,
--     blocked:quota, blocked:route, blocked:operator
--   ARGV[1] execution id  ARGV[2] lane id (the core's lane_id)
-- Replies (fields after 'OK'; index names are the lane index suffixes):
--   ok('consistent', index, score)
--   ok('repaired', index, score, added, old_score, removed) -- added '1'
--     when the member was missing from index; old_score the replaced
--     score ('' if none); removed the other indexes it was taken out of,
--     comma-separated ('' if none)
--   ok('missing')  -- no core: nothing written
--   ok('unknown', phase, eligibility, ownership)  -- no lane index fits
--     the state: nothing written
--   err('lane_mismatch', core_lane) | err('invalid_input', what)
redis.register_function('fabric_reconcile_execution_index', function(keys, args)
  local eid, lane = args[1] or '', args[2] or ''
  local tag = string.match(eid, fab.EXEC_ID)
  if not tag then return fab.err('invalid_input', 'execution_id') end
  if lane == '' then return fab.err('invalid_input', 'lane_id') end
  if #keys ~= 2 + #fab.LANE_INDEXES then return fab.err('invalid_input', 'keys') end
  local x = 'ff:exec:' .. tag .. ':' .. eid .. ':'
  if keys[1] ~= x .. 'core' or keys[2] ~= x .. 'suspension:current' then
    return fab.err('invalid_input', 'keys')
  end
  local index = {}
  for i, kind in ipairs(fab.LANE_INDEXES) do
    if keys[2 + i] ~= 'ff:idx:' .. tag .. ':lane:' .. lane .. ':' .. kind then
      return fab.err('invalid_input', 'keys')
    end
    index[kind] = keys[2 + i]
  end

  if redis.call('EXISTS', keys[1]) == 0 then return fab.ok('missing') end
  local names = {'lifecycle_phase', 'eligibility_state', 'ownership_state', 'lane_id', 'priority',
    'created_at', 'delay_until', 'lease_expires_at', 'completed_at', 'last_transition_at'}
  local vals = redis.call('HMGET', keys[1], unpack(names))
  local c = {}
  for i, n in ipairs(names) do
    if vals[i] then c[n] = vals[i] end
  end
  local core_lane = c.lane_id
  if not core_lane or core_lane == '' then core_lane = 'default' end
  if core_lane ~= lane then return fab.err('lane_mismatch', core_lane) end

  local current = {}
  for _, kind in ipairs(fab.LANE_INDEXES) do
    local s = redis.call('ZSCORE', index[kind], eid)
    if s then current[kind] = tonumber(s) end
  end
  local want, score, derived = fab.lane_score(c, keys[2], current)
  if not want then
    return fab.ok('unknown', c.lifecycle_phase or '', c.eligibility_state or '', c.ownership_state or '')
  end

  local removed = {}
  for _, kind in ipairs(fab.LANE_INDEXES) do
    if kind ~= want and current[kind] then
      redis.call('ZREM', index[kind], eid)
      removed[#removed + 1] = kind
    end
  end
  local added, old = '0', ''
  if not current[want] then
    added = '1'
    redis.call('ZADD', index[want], score, eid)
  elseif derived and current[want] ~= score then
    old = fab.score_str(current[want])
    redis.call('ZADD', index[want], score, eid)
  end
  if added == '0' and old == '' and #removed == 0 then
    return fab.ok('consistent', want, fab.score_str(score))
  end
  return fab.ok('repaired', want, fab.score_str(score), added, old, table.concat(removed, ','))
end)

-- Partition leases: fabric hosts share a deployment's partitions. Each
-- partition (of each family) has one lease hash,
-- fabric:partlease:{<tag>}, carrying the partition's hash tag so it lives
-- on the partition's slot. Fields: owner (host id, '' when free), token
-- (the fencing token: +1 at every acquisition, never reset), expires_at
-- (server ms). Expiry is judged by the server's clock only, so hosts'
-- clocks never need to agree.

-- fab.now_ms is the server's clock in milliseconds.
function fab.now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fabric_claim_partition acquires or renews one partition lease.
--   KEYS[1] lease hash  ARGV[1] host id  ARGV[2] ttl ms
--   ARGV[3] the token the caller holds ('' to acquire)
-- A live lease of the caller whose token matches (or when ARGV[3] is '')
-- is renewed; a free or expired lease is acquired with a new token; a
-- live lease of another host (or of the caller under another token) is
-- left alone.
-- Replies: ok('acquired', token, expires_at) | ok('renewed', token,
--   expires_at) | ok('held', owner, token, expires_at) |
--   err('invalid_input', what)
redis.register_function('fabric_claim_partition', function(keys, args)
  local key, host, held = keys[1], args[1], args[3] or ''
  local ttl = tonumber(args[2] or '')
  if not key then return fab.err('invalid_input', 'keys') end
  if not host or host == '' then return fab.err('invalid_input', 'host_id') end
  if not ttl or ttl <= 0 then return fab.err('invalid_input', 'ttl_ms') end
  local now = fab.now_ms()
  local f = redis.call('HMGET', key, 'owner', 'token', 'expires_at')
  local owner, token, expires = f[1] or '', f[2] or '0', tonumber(f[3] or '') or 0
  local live = owner ~= '' and expires > now
  local exp = tostring(now + math.floor(ttl))
  if live and owner == host and (held == '' or held == token) then
    redis.call('HSET', key, 'expires_at', exp)
    return fab.ok('renewed', token, exp)
  end
  if live then
    return fab.ok('held', owner, token, tostring(expires))
  end
  token = tostring(redis.call('HINCRBY', key, 'token', 1))
  redis.call('HSET', key, 'owner', host, 'expires_at', exp)
  return fab.ok('acquired', token, exp)
end)

-- fabric_release_partition frees a lease the caller holds under token (the
-- token is kept: the next owner's is higher).
--   KEYS[1] lease hash  ARGV[1] host id  ARGV[2] token
-- Replies: ok('released') | ok('not_owner', owner, token) |
--   err('invalid_input', what)
redis.register_function('fabric_release_partition', function(keys, args)
  local key, host, token = keys[1], args[1], args[2]
  if not key then return fab.err('invalid_input', 'keys') end
  if not host or host == '' then return fab.err('invalid_input', 'host_id') end
  if not token or token == '' then return fab.err('invalid_input', 'token') end
  local f = redis.call('HMGET', key, 'owner', 'token')
  if (f[1] or '') ~= host or (f[2] or '') ~= token then
    return fab.ok('not_owner', f[1] or '', f[2] or '0')
  end
  redis.call('HSET', key, 'owner', '', 'expires_at', '0')
  return fab.ok('released')
end)

-- fabric_host_heartbeat records a live host in the members zset (score:
-- its expiry, server ms), drops expired members, and returns the live ones.
--   KEYS[1] members zset  ARGV[1] host id  ARGV[2] ttl ms
-- Replies: ok(now_ms, host, expires_at, host, expires_at, ...) in host
--   order | err('invalid_input', what)
redis.register_function('fabric_host_heartbeat', function(keys, args)
  local key, host = keys[1], args[1]
  local ttl = tonumber(args[2] or '')
  if not key then return fab.err('invalid_input', 'keys') end
  if not host or host == '' then return fab.err('invalid_input', 'host_id') end
  if not ttl or ttl <= 0 then return fab.err('invalid_input', 'ttl_ms') end
  local now = fab.now_ms()
  redis.call('ZREMRANGEBYSCORE', key, '-inf', tostring(now))
  redis.call('ZADD', key, tostring(now + math.floor(ttl)), host)
  local m = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local pairs_ = {}
  for i = 1, #m, 2 do table.insert(pairs_, {m[i], m[i + 1]}) end
  table.sort(pairs_, function(a, b) return a[1] < b[1] end)
  local out = {1, 'OK', tostring(now)}
  for _, p in ipairs(pairs_) do
    table.insert(out, p[1])
    table.insert(out, p[2])
  end
  return out
end)

-- fabric_host_leave removes a host from the members zset.
--   KEYS[1] members zset  ARGV[1] host id
-- Replies: ok('left') | ok('absent') | err('invalid_input', what)
redis.register_function('fabric_host_leave', function(keys, args)
  local key, host = keys[1], args[1]
  if not key then return fab.err('invalid_input', 'keys') end
  if not host or host == '' then return fab.err('invalid_input', 'host_id') end
  if redis.call('ZREM', key, host) == 1 then return fab.ok('left') end
  return fab.ok('absent')
end)

-- fabric_periodic_advance moves a periodic schedule past the tick it just
-- fired, once the tick's execution exists (the periodic scanner creates it
-- in the same pipeline with a deterministic id, so every host creates the
-- same one; this makes the advance a compare-and-set on the tick).
--   KEYS[1] schedule hash  KEYS[2] periodic index zset
--   KEYS[3] exec core of the tick's execution
--   ARGV[1] schedule name  ARGV[2] tick_ms (the fired next_due_ms)
--   ARGV[3] next tick ms ('0': none, the schedule leaves the index)
--   ARGV[4] the tick's execution id
-- Replies: ok('advanced', next) | ok('stale') (another host advanced it) |
--   ok('gone') (schedule removed: index entry dropped) |
--   err('not_created') (no execution for the tick: nothing moved) |
--   err('invalid_input', what)
redis.register_function('fabric_periodic_advance', function(keys, args)
  local def, idx, core = keys[1], keys[2], keys[3]
  if not def or not idx or not core then return fab.err('invalid_input', 'keys') end
  local name, tick, nxt, eid = args[1], args[2], tonumber(args[3] or ''), args[4]
  if not name or name == '' then return fab.err('invalid_input', 'name') end
  if not tick or tick == '' or not tonumber(tick) then return fab.err('invalid_input', 'tick_ms') end
  if not nxt then return fab.err('invalid_input', 'next_ms') end
  if redis.call('EXISTS', def) == 0 then
    redis.call('ZREM', idx, name)
    return fab.ok('gone')
  end
  if redis.call('HGET', def, 'next_due_ms') ~= tick then return fab.ok('stale') end
  if redis.call('EXISTS', core) == 0 then return fab.err('not_created') end
  redis.call('HSET', def, 'last_tick_ms', tick, 'last_execution_id', eid or '')
  if nxt > 0 then
    redis.call('HSET', def, 'next_due_ms', string.format('%d', nxt))
    redis.call('ZADD', idx, nxt, name)
  else
    redis.call('HSET', def, 'next_due_ms', '')
    redis.call('ZREM', idx, name)
  end
  return fab.ok('advanced', string.format('%d', nxt))
end)
