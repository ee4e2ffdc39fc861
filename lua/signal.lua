-- Signal delivery, buffering for pending waitpoints, and the resume claim.
-- Uses wphmac, cond and susp from suspension.lua.

local sig = {}

-- Parses the 18 signal ARGV shared by deliver and buffer. Returns the
-- table, or nil plus the invalid_input reply. Empty numeric slots take
-- their defaults.
function sig.args(args)
  local a = {
    signal_id = args[1] or '',
    execution_id = args[2] or '',
    waitpoint_id = args[3] or '',
    signal_name = args[4] or '',
    signal_category = args[5] or '',
    source_type = args[6] or '',
    source_identity = args[7] or '',
    payload = args[8] or '',
    payload_encoding = args[9] or 'json',
    idempotency_key = args[10] or '',
    correlation_id = args[11] or '',
    target_scope = args[12] or 'waitpoint',
    created_at = args[13] or '',
    waitpoint_token = args[18] or '',
  }
  local nums = {
    {'dedup_ttl_ms', 14, 86400000}, {'resume_delay_ms', 15, 0},
    {'signal_maxlen', 16, 1000}, {'max_signals_per_execution', 17, 10000},
  }
  for _, spec in ipairs(nums) do
    local v, e = susp.num_or(args[spec[2]], spec[3], spec[1])
    if not v then return nil, e end
    a[spec[1]] = v
  end
  return a
end

-- Authenticates the token against the waitpoint's mint-time binding,
-- stamping the core on failure. Returns nil or the error reply.
function sig.auth(core_key, store_key, a, wp, now)
  local code = wphmac.verify(store_key, a.waitpoint_token, a.waitpoint_id,
    wp.waitpoint_key or '', tonumber(wp.created_at) or 0, now)
  if code then
    redis.call('HSET', core_key, 'last_hmac_validation_failed_at', tostring(now))
    return err(code)
  end
  return nil
end

-- Signal-count limit and idempotency. Returns nil to proceed, or the
-- reply to return (an error or the DUPLICATE status).
function sig.admit(a, signals_key, dedup_key)
  if a.max_signals_per_execution > 0
      and redis.call('ZCARD', signals_key) >= a.max_signals_per_execution then
    return err('signal_limit_exceeded')
  end
  if a.idempotency_key ~= '' and a.dedup_ttl_ms > 0 then
    local first = redis.call('GET', dedup_key)
    if first then return ok_status('DUPLICATE', first) end
    redis.call('SET', dedup_key, a.signal_id, 'PX', a.dedup_ttl_ms, 'NX')
  end
  return nil
end

-- Writes the signal hash, payload, waitpoint stream entry and exec index.
function sig.record(a, now, keys, extra_effect)
  local f = {
    'signal_id', a.signal_id,
    'target_execution_id', a.execution_id,
    'target_waitpoint_id', a.waitpoint_id,
    'target_scope', a.target_scope,
    'signal_name', a.signal_name,
    'signal_category', a.signal_category,
    'source_type', a.source_type,
    'source_identity', a.source_identity,
    'correlation_id', a.correlation_id,
    'idempotency_key', a.idempotency_key,
    'created_at', a.created_at ~= '' and a.created_at or tostring(now),
    'accepted_at', tostring(now),
    'matched_waitpoint_id', a.waitpoint_id,
    'payload_encoding', a.payload_encoding,
  }
  if extra_effect then
    f[#f + 1] = 'observed_effect'
    f[#f + 1] = extra_effect
  end
  redis.call('HSET', keys.signal, unpack(f))
  if a.payload ~= '' then
    redis.call('SET', keys.payload, a.payload)
  end
  redis.call('XADD', keys.stream, 'MAXLEN', '~', tostring(a.signal_maxlen), '*',
    'signal_id', a.signal_id,
    'signal_name', a.signal_name,
    'signal_category', a.signal_category,
    'source_type', a.source_type,
    'source_identity', a.source_identity,
    'matched', '0',
    'accepted_at', tostring(now))
  redis.call('ZADD', keys.exec_signals, now, a.signal_id)
end

---------------------------------------------------------------------------
-- ff_deliver_signal
-- KEYS(15): exec_core, waitpoint_condition, waitpoint_signals,
--   exec_signals, signal, signal_payload, signal_dedup|noop, waitpoint,
--   suspension_current, lane_eligible, lane_suspended, lane_delayed,
--   suspension_timeout, hmac_secrets, partition signal_delivery stream.
-- ARGV(18): signal_id, execution_id, waitpoint_id, signal_name,
--   signal_category, source_type, source_identity, payload,
--   payload_encoding, idempotency_key, correlation_id, target_scope,
--   created_at, dedup_ttl_ms, resume_delay_ms, signal_maxlen,
--   max_signals_per_execution, waitpoint_token.
---------------------------------------------------------------------------
redis.register_function('ff_deliver_signal', function(keys, args)
  if #keys < 15 or #args < 3 then
    return err('invalid_input', 'ff_deliver_signal needs 15 KEYS and 18 ARGV')
  end
  local a, aerr = sig.args(args)
  if not a then return aerr end
  local now = now_ms()
  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end

  -- Authenticate before revealing anything about state.
  local wp = hash_table(keys[8])
  if not wp.created_at then return err('invalid_token') end
  local auth_err = sig.auth(keys[1], keys[14], a, wp, now)
  if auth_err then return auth_err end

  local phase = core.lifecycle_phase
  if phase == 'terminal' then return err('target_not_signalable') end
  if phase == 'active' or phase == 'runnable' or phase == 'submitted' then
    if wp.state == 'pending' then return err('waitpoint_pending_use_buffer_script') end
    if wp.state ~= 'active' then return err('target_not_signalable') end
  end
  local wc = hash_table(keys[2])
  if next(wc) == nil then return err('waitpoint_not_found') end
  if wc.closed == '1' then return err('waitpoint_closed') end
  local stop = sig.admit(a, keys[4], keys[7])
  if stop then return stop end

  sig.record(a, now, {signal = keys[5], payload = keys[6], stream = keys[3], exec_signals = keys[4]})

  local eid = a.execution_id
  local effect, matched, resumed = 'appended_to_waitpoint', false, false
  local closer, satisfiers
  if wc.composite == '1' then
    local tree = nil
    if is_set(wc.tree_json) then
      local okd, t = pcall(cjson.decode, wc.tree_json)
      if okd then tree = t end
    end
    local out = cond.composite_deliver(tree, keys[9] .. ':satisfied_set', a.waitpoint_id,
      wp.waitpoint_key or '', a)
    effect = out.effect
    matched = effect ~= 'signal_ignored_not_in_condition' and effect ~= 'signal_ignored_matcher_failed'
    resumed = out.resume == true
    closer, satisfiers = out.closer, out.satisfiers
  else
    local total = tonumber(wc.total_matchers or '0') or 0
    for i = 0, total - 1 do
      local p = 'matcher:' .. i .. ':'
      local name = wc[p .. 'name'] or ''
      if wc[p .. 'satisfied'] == '0' and (name == '' or name == a.signal_name) then
        matched = true
        local count = (tonumber(wc.satisfied_count or '0') or 0) + 1
        redis.call('HSET', keys[2], p .. 'satisfied', '1', p .. 'signal_id', a.signal_id)
        redis.call('HSET', keys[2], 'satisfied_count', tostring(count))
        resumed = cond.met(wc.match_mode or 'any', count,
          tonumber(wc.minimum_signal_count or '1') or 1, total)
        break
      end
    end
    if resumed then
      effect = 'resume_condition_satisfied'
    elseif not matched then
      effect = 'no_op'
    end
  end

  if resumed then
    if phase == 'suspended' then
      susp.resume_core(keys[1], core, eid, now, a.resume_delay_ms,
        'resume delay ' .. tostring(a.resume_delay_ms) .. 'ms after signal ' .. a.signal_name,
        keys[11], keys[10], keys[12])
    end
    redis.call('HSET', keys[2], 'closed', '1', 'closed_at', tostring(now), 'closed_reason', 'satisfied')
    redis.call('HSET', keys[8],
      'state', 'closed',
      'satisfied_at', tostring(now),
      'closed_at', tostring(now),
      'close_reason', 'resumed')
    local record = nil
    if redis.call('EXISTS', keys[9]) == 1 then
      if wc.composite == '1' then
        record = hash_table(keys[9])
        redis.call('HSET', keys[9],
          'satisfied_at', tostring(now),
          'closed_at', tostring(now),
          'close_reason', 'resumed',
          'closer_signal_id', closer or a.signal_id,
          'all_satisfier_signals', satisfiers or '[]')
      else
        redis.call('HSET', keys[9],
          'satisfied_at', tostring(now),
          'closed_at', tostring(now),
          'close_reason', 'resumed')
      end
    end
    redis.call('ZREM', keys[13], eid)
    if wc.composite == '1' then
      cond.cleanup(keys[9])
      if record then susp.close_extras(keyfmt.tag(keys[1]), record, now, 'resumed', true) end
    end
  end

  redis.call('HSET', keys[5], 'observed_effect', effect)
  redis.call('HINCRBY', keys[8], 'signal_count', 1)
  if matched then
    redis.call('HINCRBY', keys[8], 'matched_signal_count', 1)
  end
  redis.call('HSET', keys[8], 'last_signal_at', tostring(now))
  if redis.call('EXISTS', keys[9]) == 1 and not (resumed and wc.composite == '1') then
    redis.call('HSET', keys[9], 'last_signal_at', tostring(now))
  end
  redis.call('XADD', keys[15], 'MAXLEN', '~', HISTORY_MAXLEN, '*',
    'signal_id', a.signal_id,
    'execution_id', eid,
    'waitpoint_id', a.waitpoint_id,
    'source_identity', a.source_identity,
    'effect', effect,
    'delivered_at_ms', tostring(now))
  return ok(a.signal_id, effect)
end)

---------------------------------------------------------------------------
-- ff_buffer_signal_for_pending_waitpoint
-- KEYS(9): exec_core, waitpoint_condition (unused), waitpoint_signals,
--   exec_signals, signal, signal_payload, signal_dedup|noop, waitpoint,
--   hmac_secrets.
-- ARGV(18): as ff_deliver_signal (resume_delay_ms unused).
---------------------------------------------------------------------------
redis.register_function('ff_buffer_signal_for_pending_waitpoint', function(keys, args)
  if #keys < 9 or #args < 3 then
    return err('invalid_input', 'ff_buffer_signal_for_pending_waitpoint needs 9 KEYS and 18 ARGV')
  end
  local a, aerr = sig.args(args)
  if not a then return aerr end
  local now = now_ms()
  if redis.call('EXISTS', keys[1]) == 0 then return err('execution_not_found') end
  local wp = hash_table(keys[8])
  if not wp.created_at then return err('waitpoint_not_found') end
  local auth_err = sig.auth(keys[1], keys[9], a, wp, now)
  if auth_err then return auth_err end
  if wp.state == 'closed' or wp.state == 'expired' then return err('waitpoint_closed') end
  local stop = sig.admit(a, keys[4], keys[7])
  if stop then return stop end
  sig.record(a, now, {signal = keys[5], payload = keys[6], stream = keys[3], exec_signals = keys[4]},
    'buffered_for_pending_waitpoint')
  return ok(a.signal_id, 'buffered_for_pending_waitpoint')
end)

---------------------------------------------------------------------------
-- ff_claim_resumed_execution
-- KEYS(11): exec_core, claim_grant, lane_eligible, lease_expiry,
--   worker_leases, attempt_hash, lease_current, lease_history, lane_active,
--   attempt_timeout, execution_deadline (unused).
-- ARGV(8): execution_id, worker_id, worker_instance_id, lane,
--   capability_hash, lease_id, lease_ttl_ms, remaining_attempt_timeout_ms.
---------------------------------------------------------------------------
redis.register_function('ff_claim_resumed_execution', function(keys, args)
  if #keys < 10 or #args < 7 then
    return err('invalid_input', 'ff_claim_resumed_execution needs 11 KEYS and 8 ARGV')
  end
  local ttl, terr = num_arg(args[7], 'lease_ttl_ms')
  if not ttl then return terr end
  local remaining, rerr = susp.num_or(args[8], 0, 'remaining_attempt_timeout_ms')
  if not remaining then return rerr end
  local eid, worker, wiid, lane, lease_id = args[1], args[2], args[3], args[4], args[6]
  local now = now_ms()
  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' then return err('execution_not_leaseable') end
  if core.attempt_state ~= 'attempt_interrupted' then return err('not_a_resumed_execution') end
  local grant = hash_table(keys[2])
  if next(grant) == nil or grant.worker_id ~= worker then return err('invalid_claim_grant') end
  if is_set(grant.grant_expires_at) and (tonumber(grant.grant_expires_at) or 0) < now then
    redis.call('DEL', keys[2])
    return err('claim_grant_expired')
  end
  redis.call('DEL', keys[2])

  local idx, att_id = core.current_attempt_index or '', core.current_attempt_id or ''
  local epoch = tostring((tonumber(core.current_lease_epoch or '0') or 0) + 1)
  local expires = now + ttl
  local renewal = now + math.floor(ttl * 2 / 3)
  redis.call('HSET', keys[6],
    'attempt_state', 'started',
    'resumed_at', tostring(now),
    'lease_id', lease_id,
    'lease_epoch', epoch,
    'worker_id', worker,
    'worker_instance_id', wiid,
    'suspended_at', '',
    'suspension_id', '')
  write_lease_current(keys[7], {
    lease_id = lease_id, lease_epoch = epoch, execution_id = eid,
    attempt_id = att_id, worker_id = worker, worker_instance_id = wiid,
    acquired_at = tostring(now), expires_at = tostring(expires), renewal_deadline = tostring(renewal),
  })
  hset_pairs(keys[1], CLAIMED_VECTOR, {
    'current_lease_id', lease_id,
    'current_lease_epoch', epoch,
    'current_worker_id', worker,
    'current_worker_instance_id', wiid,
    'current_lane', lane,
    'lease_acquired_at', tostring(now),
    'lease_expires_at', tostring(expires),
    'lease_last_renewed_at', tostring(now),
    'lease_renewal_deadline', tostring(renewal),
    'lease_expired_at', '',
    'lease_revoked_at', '',
    'lease_revoke_reason', '',
    'last_transition_at', tostring(now),
    'last_mutation_at', tostring(now),
  })
  redis.call('ZREM', keys[3], eid)
  redis.call('ZADD', keys[4], expires, eid)
  redis.call('SADD', keys[5], eid)
  redis.call('ZADD', keys[9], expires, eid)
  if remaining > 0 then
    redis.call('ZADD', keys[10], now + remaining, eid)
  end
  history_add(keys[8],
    'event', 'acquired',
    'lease_id', lease_id,
    'lease_epoch', epoch,
    'attempt_index', idx,
    'attempt_id', att_id,
    'worker_id', worker,
    'reason', 'claim_resumed',
    'ts', tostring(now))
  return ok(lease_id, epoch, tostring(expires), att_id, idx, 'resumed')
end)
