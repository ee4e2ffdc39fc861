-- Budgets. Budget keys live on {b:M}; ff_unblock_execution and
-- ff_block_execution_for_admission work on the execution's {fp:N}.
--
-- Hard limits are checked for every dimension before anything is
-- incremented (a breach increments nothing); soft limits are advisory and
-- reported after the increment. A limit <= 0 means "no limit".

-- File-local helpers, grouped in one table to spare top-level locals.
local budgetx = {}

-- Dimension -> eligibility state for admission blocks.
budgetx.BLOCK_ELIGIBILITY = {
  waiting_for_budget = 'blocked_by_budget',
  waiting_for_quota = 'blocked_by_quota',
  waiting_for_capable_worker = 'blocked_by_route',
  paused_by_operator = 'blocked_by_operator',
  paused_by_policy = 'blocked_by_lane_state',
}

budgetx.UNBLOCKABLE = {
  blocked_by_budget = true,
  blocked_by_quota = true,
  blocked_by_route = true,
  blocked_by_operator = true,
}

-- Numeric value of a stored limit; unset or unparsable means no limit.
function budgetx.limit(raw)
  if not is_set(raw) then return nil end
  return tonumber(raw)
end

-- Parses `count` integer deltas. get(i) returns the raw delta of dimension
-- i. Returns the list of numbers, or nil plus the invalid_input reply.
function budgetx.deltas(count, get, dim_of)
  local out = {}
  for i = 1, count do
    local d, e = num_arg(get(i), 'delta')
    if e then return nil, e end
    if d ~= math.floor(d) then
      return nil, err('invalid_input', 'delta must be an integer, got: ' .. tostring(get(i)))
    end
    if dim_of(i) == nil then
      return nil, err('invalid_input', 'missing dimension name')
    end
    out[i] = d
  end
  return out
end

-- The shared body of report_usage_and_check and record_spend: phase 1
-- checks every hard limit without writing; phase 2 increments and notes
-- the first soft breach. mirror(dim, delta) runs after each increment.
function budgetx.apply(usage_key, limits_key, def_key, dims, deltas, now, dedup_key, mirror, after)
  if dedup_key ~= '' and redis.call('GET', dedup_key) then
    return {1, 'ALREADY_APPLIED'}
  end

  for i = 1, #dims do
    local dim = dims[i]
    local current = tonumber(redis.call('HGET', usage_key, dim) or '0') or 0
    local hard_raw = redis.call('HGET', limits_key, 'hard:' .. dim)
    local hard = budgetx.limit(hard_raw)
    if hard and hard > 0 and current + deltas[i] > hard then
      redis.call('HINCRBY', def_key, 'breach_count', 1)
      redis.call('HSET', def_key,
        'last_breach_at', now,
        'last_breach_dim', dim,
        'last_updated_at', now)
      return {1, 'HARD_BREACH', dim, tostring(current), tostring(hard_raw)}
    end
  end

  local soft_dim = nil
  for i = 1, #dims do
    local dim = dims[i]
    local value = redis.call('HINCRBY', usage_key, dim, deltas[i])
    if mirror then mirror(dim, deltas[i]) end
    local soft = budgetx.limit(redis.call('HGET', limits_key, 'soft:' .. dim))
    if soft and soft > 0 and value > soft and not soft_dim then
      soft_dim = dim
    end
  end
  if after then after() end

  redis.call('HSET', def_key, 'last_updated_at', now)
  if dedup_key ~= '' then
    redis.call('SET', dedup_key, '1', 'PX', 86400000)
  end

  if soft_dim then
    redis.call('HINCRBY', def_key, 'soft_breach_count', 1)
    local soft = tonumber(redis.call('HGET', limits_key, 'soft:' .. soft_dim) or '0') or 0
    local cur = tonumber(redis.call('HGET', usage_key, soft_dim) or '0') or 0
    return {1, 'SOFT_BREACH', soft_dim, tostring(cur), tostring(soft)}
  end
  return {1, 'OK'}
end

-- KEYS: def, limits, usage, budget_resets, budget_policies.
-- ARGV: budget_id, scope_type, scope_id, enforcement_mode, on_hard_limit,
-- on_soft_limit, reset_interval_ms, now_ms, D, D names, D hard, D soft.
redis.register_function('ff_create_budget', with_keys(5, function(keys, args)
  local budget_id = args[1]
  if budget_id == nil then
    return err('invalid_input', 'budget_id required')
  end
  redis.call('SADD', keys[5], budget_id)
  if redis.call('EXISTS', keys[1]) == 1 then
    return ok_status('ALREADY_SATISFIED', budget_id)
  end

  local d, e = num_arg(args[9], 'dim_count')
  if e then return e end
  local interval
  interval, e = num_arg(args[7], 'reset_interval_ms')
  if e then return e end
  if interval > 0 then
    local _, e2 = num_arg(args[8], 'now_ms')
    if e2 then return e2 end
  end
  if #args < 9 + 3 * d then
    return err('invalid_input', 'expected ' .. int_str(9 + 3 * d) .. ' arguments, got ' .. #args)
  end
  for i = 2, 8 do
    if args[i] == nil then return err('invalid_input', 'missing argument ' .. i) end
  end

  redis.call('HSET', keys[1],
    'budget_id', budget_id,
    'scope_type', args[2],
    'scope_id', args[3],
    'enforcement_mode', args[4],
    'on_hard_limit', args[5],
    'on_soft_limit', args[6],
    'reset_interval_ms', args[7],
    'breach_count', '0',
    'soft_breach_count', '0',
    'created_at', args[8],
    'last_updated_at', args[8])

  for i = 1, d do
    redis.call('HSET', keys[2],
      'hard:' .. args[9 + i], args[9 + d + i],
      'soft:' .. args[9 + i], args[9 + 2 * d + i])
  end

  if interval > 0 then
    local next_reset = tostring(tonumber(args[8]) + interval)
    redis.call('HSET', keys[1], 'next_reset_at', next_reset)
    redis.call('ZADD', keys[4], tonumber(next_reset), budget_id)
  end
  return ok(budget_id)
end))

-- KEYS: usage, limits, def.
-- ARGV: D, D names, D deltas, now_ms, dedup key ("" = none).
redis.register_function('ff_report_usage_and_check', with_keys(3, function(keys, args)
  local d, e = num_arg(args[1], 'dim_count')
  if e then return e end
  local dims = {}
  for i = 1, d do dims[i] = args[1 + i] end
  local deltas
  deltas, e = budgetx.deltas(d,
    function(i) return args[1 + d + i] end,
    function(i) return dims[i] end)
  if e then return e end
  local now = args[2 * d + 2]
  if now == nil then
    return err('invalid_input', 'now_ms required')
  end
  return budgetx.apply(keys[1], keys[2], keys[3], dims, deltas, now,
    args[2 * d + 3] or '', nil, nil)
end))

-- KEYS: usage, limits, def, by_exec:<eid>, by_exec:index.
-- ARGV: P, P (dim, delta) pairs, now_ms, dedup key, execution_id.
redis.register_function('ff_record_spend', with_keys(5, function(keys, args)
  local p, e = num_arg(args[1], 'pair_count')
  if e then return e end
  local dims = {}
  for i = 1, p do dims[i] = args[2 * i] end
  local deltas
  deltas, e = budgetx.deltas(p,
    function(i) return args[2 * i + 1] end,
    function(i) return dims[i] end)
  if e then return e end
  local now = args[2 + 2 * p]
  if now == nil then
    return err('invalid_input', 'now_ms required')
  end
  local eid = args[4 + 2 * p] or ''
  local mirror, after = nil, nil
  if eid ~= '' then
    mirror = function(dim, delta) redis.call('HINCRBY', keys[4], dim, delta) end
    after = function() redis.call('SADD', keys[5], eid) end
  end
  return budgetx.apply(keys[1], keys[2], keys[3], dims, deltas, now,
    args[3 + 2 * p] or '', mirror, after)
end))

-- KEYS: usage, by_exec:<eid>, by_exec:index. ARGV: budget_id, execution_id.
redis.register_function('ff_release_budget', with_keys(3, function(keys, args)
  local eid = args[2]
  if eid == nil then
    return err('invalid_input', 'execution_id required')
  end
  local flat = redis.call('HGETALL', keys[2])
  if #flat == 0 then
    return ok('noop')
  end
  for i = 1, #flat, 2 do
    local delta = tonumber(flat[i + 1]) or 0
    if delta > 0 then
      local cur = tonumber(redis.call('HGET', keys[1], flat[i]) or '0') or 0
      local left = cur - delta
      if left < 0 then left = 0 end
      redis.call('HSET', keys[1], flat[i], tostring(left))
    end
  end
  redis.call('DEL', keys[2])
  redis.call('SREM', keys[3], eid)
  return ok('released')
end))

-- KEYS: def, usage, budget_resets. ARGV: budget_id, now_ms.
redis.register_function('ff_reset_budget', with_keys(3, function(keys, args)
  local budget_id = args[1]
  if budget_id == nil then
    return err('invalid_input', 'budget_id required')
  end
  local now_n, e = num_arg(args[2], 'now_ms')
  if e then return e end
  local now = args[2]

  local fields = redis.call('HKEYS', keys[2])
  if #fields > 0 then
    local zeroes = {}
    for _, f in ipairs(fields) do
      zeroes[#zeroes + 1] = f
      zeroes[#zeroes + 1] = '0'
    end
    call_chunked('HSET', keys[2], zeroes)
  end

  redis.call('HINCRBY', keys[1], 'reset_count', 1)
  redis.call('HSET', keys[1],
    'last_reset_at', now,
    'last_updated_at', now,
    'last_breach_at', '',
    'last_breach_dim', '')

  local interval = tonumber(redis.call('HGET', keys[1], 'reset_interval_ms') or '0') or 0
  local next_reset = '0'
  if interval > 0 then
    next_reset = tostring(now_n + interval)
    redis.call('HSET', keys[1], 'next_reset_at', next_reset)
    redis.call('ZADD', keys[3], tonumber(next_reset), budget_id)
  else
    redis.call('ZREM', keys[3], budget_id)
  end
  return ok(next_reset)
end))

-- KEYS: exec_core, source blocked ZSET, lane eligible.
-- ARGV: execution_id, now_ms, expected blocking_reason ("" = any).
redis.register_function('ff_unblock_execution', with_keys(3, function(keys, args)
  local eid = args[1]
  if eid == nil then
    return err('invalid_input', 'execution_id required')
  end
  local _, e = num_arg(args[2], 'now_ms')
  if e then return e end
  local now = args[2]
  local expected = args[3] or ''

  local core = hash_table(keys[1])
  if next(core) == nil then
    return err('execution_not_found')
  end
  if core.lifecycle_phase ~= 'runnable' then
    return err('execution_not_eligible')
  end
  if not budgetx.UNBLOCKABLE[core.eligibility_state or ''] then
    return err('execution_not_eligible')
  end
  if expected ~= '' and core.blocking_reason ~= expected then
    return err('execution_not_eligible')
  end

  redis.call('HSET', keys[1],
    'lifecycle_phase', 'runnable',
    'ownership_state', 'unowned',
    'eligibility_state', 'eligible_now',
    'blocking_reason', 'waiting_for_worker',
    'blocking_detail', '',
    'terminal_outcome', 'none',
    'attempt_state', core.attempt_state or 'pending_first_attempt',
    'public_state', 'waiting',
    'last_transition_at', now,
    'last_mutation_at', now)
  redis.call('ZREM', keys[2], eid)
  redis.call('ZADD', keys[3], eligible_score(core.priority, core.created_at), eid)
  return ok('unblocked')
end))

-- KEYS: exec_core, lane eligible, target blocked ZSET.
-- ARGV: execution_id, blocking_reason, blocking_detail, now_ms.
redis.register_function('ff_block_execution_for_admission', with_keys(3, function(keys, args)
  local eid = args[1]
  if eid == nil then
    return err('invalid_input', 'execution_id required')
  end
  local now_n, e = num_arg(args[4], 'now_ms')
  if e then return e end
  local now = args[4]
  local reason = args[2]

  local core = hash_table(keys[1])
  if next(core) == nil then
    return err('execution_not_found')
  end
  if core.lifecycle_phase ~= 'runnable' then
    if core.lifecycle_phase == 'terminal' then
      return err('execution_not_active',
        core.terminal_outcome or '',
        core.current_lease_epoch or '',
        'terminal',
        core.current_attempt_id or '')
    end
    return err('execution_not_eligible')
  end
  local eligibility = budgetx.BLOCK_ELIGIBILITY[reason or '']
  if not eligibility then
    return err('invalid_blocking_reason')
  end

  redis.call('HSET', keys[1],
    'lifecycle_phase', 'runnable',
    'ownership_state', 'unowned',
    'eligibility_state', eligibility,
    'blocking_reason', reason,
    'blocking_detail', args[3] or '',
    'terminal_outcome', 'none',
    'attempt_state', core.attempt_state or 'pending_first_attempt',
    'public_state', 'rate_limited',
    'last_transition_at', now,
    'last_mutation_at', now)
  redis.call('ZREM', keys[2], eid)
  redis.call('ZADD', keys[3], now_n, eid)
  return ok('blocked')
end))
