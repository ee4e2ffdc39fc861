-- execution.lua: the execution lifecycle (create, claim, complete, cancel,
-- delay, wait for children, fail, reclaim, expire, tags).
--
-- Every function reads exec_core first and writes it first on a transition;
-- errors are {0, code, ...} replies, never Lua errors. Numeric ARGV are
-- checked with num_arg so garbage input yields invalid_input rather than a
-- script error.

-- File-local helpers, grouped in one table to spend a single chunk local.
local xh = {}

-- Validates routing_requirements.required_capabilities of a create-time
-- policy. Returns the sorted CSV (or nil when there are no caps), or false
-- plus the error reply.
function xh.required_caps(policy_json)
  if not is_set(policy_json) or policy_json == '{}' then
    return nil
  end
  local decoded, policy = pcall(cjson.decode, policy_json)
  if not decoded then
    return false, err('invalid_policy_json', 'malformed')
  end
  if type(policy) ~= 'table' or policy.routing_requirements == nil then
    return nil
  end
  local rr = policy.routing_requirements
  if type(rr) ~= 'table' then
    return false, err('invalid_policy_json', 'routing_requirements:not_object')
  end
  local caps = rr.required_capabilities
  if caps == nil then
    return nil
  end
  if type(caps) ~= 'table' then
    return false, err('invalid_capabilities', 'required:not_array')
  end
  local list = {}
  for _, cap in ipairs(caps) do
    if type(cap) ~= 'string' then
      return false, err('invalid_capabilities', 'required:non_string_token')
    end
    if cap == '' then
      return false, err('invalid_capabilities', 'required:empty_token')
    end
    if string.find(cap, ',', 1, true) then
      return false, err('invalid_capabilities', 'required:comma_in_token')
    end
    for i = 1, #cap do
      local b = string.byte(cap, i)
      if b <= 32 or b == 127 then
        return false, err('invalid_capabilities', 'required:control_or_whitespace')
      end
    end
    list[#list + 1] = cap
  end
  if #list > CAPS_MAX_TOKENS then
    return false, err('invalid_capabilities', 'required:too_many_tokens')
  end
  if #list == 0 then
    return nil
  end
  table.sort(list)
  local csv = table.concat(list, ',')
  if #csv > CAPS_MAX_BYTES then
    return false, err('invalid_capabilities', 'required:too_many_bytes')
  end
  return csv
end

-- True when an idempotency KEYS slot names a real key (not the noop slot).
function xh.real_idem_key(k)
  return k ~= nil and k ~= '' and not string.find(k, 'ff:noop:', 1, true)
end

-- ff_create_execution
-- KEYS: core, payload, policy, tags, scheduling zset (eligible|delayed),
--       idem key (or ff:noop:<tag>), execution_deadline, all_executions
-- ARGV: eid, namespace, lane_id, kind, priority, creator, policy_json,
--       payload, delay_until, dedup_ttl_ms, tags_json, deadline_at,
--       partition_id
redis.register_function('ff_create_execution', function(keys, args)
  local priority, perr = num_arg(args[5], 'priority')
  if not priority then return perr end
  if priority < 0 then priority = 0 end
  if priority > 9000 then priority = 9000 end

  local eid = args[1] or ''
  local lane = args[3] or ''
  local delay_until = args[9] or ''
  local deadline_at = args[12] or ''
  local now = now_ms()

  if xh.real_idem_key(keys[6]) then
    local prior = redis.call('GET', keys[6])
    if prior then
      return ok_status('DUPLICATE', prior)
    end
  end
  if redis.call('EXISTS', keys[1]) == 1 then
    return ok_status('DUPLICATE', eid)
  end

  -- Every check happens before the first write.
  local caps_csv, cerr = xh.required_caps(args[7])
  if caps_csv == false then return cerr end
  local delay_n, deadline_n
  if is_set(delay_until) then
    local e
    delay_n, e = num_arg(delay_until, 'delay_until')
    if not delay_n then return e end
  end
  if is_set(deadline_at) then
    local e
    deadline_n, e = num_arg(deadline_at, 'execution_deadline_at')
    if not deadline_n then return e end
  end

  local delayed = delay_n ~= nil and delay_n > now
  local elig, reason, detail, public
  if delayed then
    elig, reason, detail, public =
      'not_eligible_until_time', 'waiting_for_delay', 'delayed until ' .. delay_until, 'delayed'
  else
    elig, reason, detail, public = 'eligible_now', 'waiting_for_worker', '', 'waiting'
  end

  redis.call('HSET', keys[1],
    'execution_id', eid,
    'namespace', args[2] or '',
    'lane_id', lane,
    'execution_kind', args[4] or '',
    'partition_id', args[13] or '',
    'priority', priority,
    'creator_identity', args[6] or '',
    'lifecycle_phase', 'runnable',
    'ownership_state', 'unowned',
    'eligibility_state', elig,
    'blocking_reason', reason,
    'blocking_detail', detail,
    'terminal_outcome', 'none',
    'attempt_state', 'pending_first_attempt',
    'public_state', public,
    'total_attempt_count', '0',
    'current_attempt_index', '',
    'current_attempt_id', '',
    'current_lease_id', '',
    'current_lease_epoch', '0',
    'current_worker_id', '',
    'current_worker_instance_id', '',
    'current_lane', lane,
    'retry_count', '0',
    'replay_count', '0',
    'lease_reclaim_count', '0',
    'created_at', now,
    'started_at', '',
    'completed_at', '',
    'last_transition_at', now,
    'last_mutation_at', now,
    'lease_acquired_at', '',
    'lease_expires_at', '',
    'lease_last_renewed_at', '',
    'lease_renewal_deadline', '',
    'lease_expired_at', '',
    'lease_revoked_at', '',
    'lease_revoke_reason', '',
    'delay_until', delayed and delay_until or '',
    'current_suspension_id', '',
    'current_waitpoint_id', '',
    'pending_retry_reason', '',
    'pending_replay_reason', '',
    'pending_replay_requested_by', '',
    'pending_previous_attempt_index', '',
    'progress_pct', '',
    'progress_message', '',
    'progress_updated_at', '',
    'flow_id', '')

  if is_set(args[8]) then
    redis.call('SET', keys[2], args[8])
  end
  if is_set(args[7]) then
    redis.call('SET', keys[3], args[7])
  end
  if caps_csv then
    redis.call('HSET', keys[1], 'required_capabilities', caps_csv)
  end

  local tags_json = args[11]
  if is_set(tags_json) and tags_json ~= '{}' then
    local decoded, tags = pcall(cjson.decode, tags_json)
    if decoded and type(tags) == 'table' then
      local flat = {}
      for k, v in pairs(tags) do
        flat[#flat + 1] = k
        flat[#flat + 1] = tostring(v)
      end
      if #flat > 0 then
        redis.call('HSET', keys[4], unpack(flat))
      end
    end
  end

  if delayed then
    redis.call('ZADD', keys[5], delay_n, eid)
  else
    redis.call('ZADD', keys[5], 0 - (priority * PRIORITY_FACTOR) + now, eid)
  end
  redis.call('SADD', keys[8], eid)
  -- Global lane registry (untagged; FlowFabric registers a lane on first
  -- sight here as well as at boot).
  redis.call('SADD', 'ff:idx:lanes', lane)
  if deadline_n then
    redis.call('ZADD', keys[7], deadline_n, eid)
  end

  local ttl = tonumber(args[10]) or 0
  if ttl > 0 and xh.real_idem_key(keys[6]) then
    redis.call('SET', keys[6], eid, 'PX', ttl)
  end

  return ok(eid, public)
end)

-- Flattens an attempt-policy JSON object into HSET pairs: one field per
-- top-level key, nested tables JSON-encoded, scalars tostring'd. Returns
-- nil when the text is not a JSON object or array.
function xh.flatten_policy(json)
  local decoded, policy = pcall(cjson.decode, json)
  if not decoded or type(policy) ~= 'table' then
    return nil
  end
  local flat = {}
  for k, v in pairs(policy) do
    flat[#flat + 1] = k
    if type(v) == 'table' then
      flat[#flat + 1] = cjson.encode(v)
    else
      flat[#flat + 1] = tostring(v)
    end
  end
  return flat
end

-- Parses an optional numeric ARGV where "" and "0" mean "none". Returns
-- the number or false (none), or nil plus the invalid_input reply.
function xh.opt_num(v, name)
  if not is_set(v) or v == '0' then
    return false
  end
  return num_arg(v, name)
end

-- Resolves the fence of a lease-checked terminal-style call (complete,
-- fail, delay, wait-children): a full triple is checked as given; an empty
-- one is accepted only from source operator_override, in which case the
-- server's own triple stands in so only phase/revocation/expiry apply.
-- Returns the fence or nil plus the error reply.
function xh.fence_or_override(core, lease_id, lease_epoch, attempt_id, source)
  local fence, checked = resolve_fence(core, lease_id, lease_epoch, attempt_id)
  if not fence then
    return nil, checked
  end
  if not checked and source ~= 'operator_override' then
    return nil, err('fence_required')
  end
  return fence
end

-- ff_claim_execution
-- KEYS: core, claim_grant, lane eligible, lease_expiry, worker_leases,
--       attempt hash, attempt usage, attempt policy (6-8 informational),
--       attempts, lease_current, lease_history, lane active,
--       attempt_timeout, execution_deadline
-- ARGV: eid, worker_id, worker_instance_id, lane, capability_hash,
--       lease_id, lease_ttl_ms, renew_before_ms, attempt_id,
--       attempt_policy_json, attempt_timeout_ms, execution_deadline_at
redis.register_function('ff_claim_execution', function(keys, args)
  local ttl, e1 = num_arg(args[7], 'lease_ttl_ms')
  if not ttl then return e1 end
  local renew_before, e2 = num_arg(args[8], 'renew_before_ms')
  if not renew_before then return e2 end
  local attempt_timeout, e3 = xh.opt_num(args[11], 'attempt_timeout_ms')
  if attempt_timeout == nil then return e3 end
  local deadline, e4 = xh.opt_num(args[12], 'execution_deadline_at')
  if deadline == nil then return e4 end

  local eid = args[1] or ''
  local worker_id = args[2] or ''
  local wiid = args[3] or ''
  local lease_id = args[6] or ''
  local attempt_id = args[9] or ''
  local policy_json = args[10] or ''
  local now = now_ms()

  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' then return err('execution_not_leaseable') end
  if core.ownership_state ~= 'unowned' then return err('lease_conflict') end
  if core.eligibility_state ~= 'eligible_now' then return err('execution_not_leaseable') end
  if core.terminal_outcome ~= 'none' then return err('execution_not_leaseable') end
  if core.attempt_state == 'running_attempt' then return err('active_attempt_exists') end
  -- Returned before the grant is touched: the caller reuses the same grant
  -- with ff_claim_resumed_execution.
  if core.attempt_state == 'attempt_interrupted' then
    return err('use_claim_resumed_execution')
  end

  local policy_flat
  if is_set(policy_json) then
    policy_flat = xh.flatten_policy(policy_json)
    if not policy_flat then return err('invalid_policy_json', 'malformed') end
  end

  local grant = hash_table(keys[2])
  if next(grant) == nil then return err('invalid_claim_grant') end
  if grant.worker_id ~= worker_id then return err('invalid_claim_grant') end
  if is_set(grant.grant_expires_at) and (tonumber(grant.grant_expires_at) or 0) < now then
    return err('claim_grant_expired')
  end
  redis.call('DEL', keys[2])

  local epoch = (tonumber(core.current_lease_epoch) or 0) + 1
  local idx = tonumber(core.total_attempt_count) or 0
  local expires = now + ttl
  local renew_deadline = now + renew_before
  local now_s, epoch_s, idx_s = tostring(now), tostring(epoch), tostring(idx)

  local attempt_type = 'initial'
  local lineage = {}
  if core.attempt_state == 'pending_retry_attempt' then
    attempt_type = 'retry'
    lineage = {
      'retry_reason', core.pending_retry_reason or '',
      'previous_attempt_index', core.pending_previous_attempt_index or '',
    }
  elseif core.attempt_state == 'pending_replay_attempt' then
    attempt_type = 'replay'
    lineage = {
      'replay_reason', core.pending_replay_reason or '',
      'replay_requested_by', core.pending_replay_requested_by or '',
      'replayed_from_attempt_index', core.pending_previous_attempt_index or '',
    }
  end

  -- KEYS[6..8] are placeholders; the real attempt is total_attempt_count.
  local tag = keyfmt.tag(keys[1])
  local att = keyfmt.attempt(tag, eid, idx)
  hset_pairs(att, {
    'attempt_id', attempt_id,
    'execution_id', eid,
    'attempt_index', idx_s,
    'attempt_type', attempt_type,
    'attempt_state', 'started',
    'created_at', now_s,
    'started_at', now_s,
    'lease_id', lease_id,
    'lease_epoch', epoch_s,
    'worker_id', worker_id,
    'worker_instance_id', wiid,
  }, lineage)
  redis.call('ZADD', keys[9], now, idx_s)
  redis.call('HSET', keyfmt.attempt(tag, eid, idx, 'usage'), 'last_usage_report_seq', '0')
  if policy_flat and #policy_flat > 0 then
    redis.call('HSET', keyfmt.attempt(tag, eid, idx, 'policy'), unpack(policy_flat))
  end

  redis.call('DEL', keys[10])
  redis.call('HSET', keys[10],
    'lease_id', lease_id,
    'lease_epoch', epoch_s,
    'execution_id', eid,
    'attempt_id', attempt_id,
    'worker_id', worker_id,
    'worker_instance_id', wiid,
    'acquired_at', now_s,
    'expires_at', tostring(expires),
    'last_renewed_at', now_s,
    'renewal_deadline', tostring(renew_deadline))

  redis.call('HSET', keys[1],
    'lifecycle_phase', 'active',
    'ownership_state', 'leased',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', 'none',
    'attempt_state', 'running_attempt',
    'public_state', 'active',
    'current_attempt_index', idx_s,
    'total_attempt_count', tostring(idx + 1),
    'current_attempt_id', attempt_id,
    'current_lease_id', lease_id,
    'current_lease_epoch', epoch_s,
    'current_worker_id', worker_id,
    'current_worker_instance_id', wiid,
    'current_lane', args[4] or '',
    'lease_acquired_at', now_s,
    'lease_expires_at', tostring(expires),
    'lease_last_renewed_at', now_s,
    'lease_renewal_deadline', tostring(renew_deadline),
    'started_at', is_set(core.started_at) and core.started_at or now_s,
    'pending_retry_reason', '',
    'pending_replay_reason', '',
    'pending_replay_requested_by', '',
    'pending_previous_attempt_index', '',
    'last_transition_at', now_s,
    'last_mutation_at', now_s)

  redis.call('ZREM', keys[3], eid)
  redis.call('ZADD', keys[4], expires, eid)
  redis.call('SADD', keys[5], eid)
  redis.call('ZADD', keys[12], expires, eid)
  if attempt_timeout then
    redis.call('ZADD', keys[13], now + attempt_timeout, eid)
  end
  if deadline then
    redis.call('ZADD', keys[14], deadline, eid)
  end

  history_add(keys[11],
    'event', 'acquired',
    'lease_id', lease_id,
    'lease_epoch', epoch_s,
    'attempt_id', attempt_id,
    'attempt_index', idx_s,
    'worker_id', worker_id,
    'ts', now_s)

  return ok(lease_id, epoch_s, tostring(expires), attempt_id, idx_s, attempt_type)
end)

-- ff_complete_execution
-- KEYS: core, attempt hash, lease_expiry, worker_leases, lane terminal,
--       lease_current, lease_history, lane active, stream_meta, result,
--       attempt_timeout, execution_deadline
-- ARGV: eid, lease_id, lease_epoch, attempt_id, result_payload, [source]
redis.register_function('ff_complete_execution', function(keys, args)
  local eid = args[1] or ''
  local payload = args[5] or ''
  local now = now_ms()

  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  local fence, ferr = xh.fence_or_override(core, args[2], args[3], args[4], args[6] or '')
  if not fence then return ferr end
  local lerr = check_lease(core, fence, now, keys[1], keys[7])
  if lerr then return lerr end

  local now_s = tostring(now)
  redis.call('HSET', keys[2], 'attempt_state', 'ended_success', 'ended_at', now_s)
  if redis.call('EXISTS', keys[9]) == 1 then
    redis.call('HSET', keys[9], 'closed_at', now_s, 'closed_reason', 'attempt_success')
  end
  if payload ~= '' then
    redis.call('SET', keys[10], payload)
  end

  hset_pairs(keys[1], {
    'lifecycle_phase', 'terminal',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', 'success',
    'attempt_state', 'attempt_terminal',
    'public_state', 'completed',
    'completed_at', now_s,
  }, LEASE_CLEAR_FIELDS, {
    'last_transition_at', now_s,
    'last_mutation_at', now_s,
  })

  redis.call('ZREM', keys[3], eid)
  redis.call('SREM', keys[4], eid)
  redis.call('ZADD', keys[5], now, eid)
  redis.call('ZREM', keys[8], eid)
  redis.call('ZREM', keys[11], eid)
  redis.call('ZREM', keys[12], eid)
  redis.call('DEL', keys[6])
  history_add(keys[7],
    'event', 'released',
    'lease_id', fence.lease_id,
    'lease_epoch', fence.lease_epoch,
    'attempt_index', core.current_attempt_index or '',
    'reason', 'completed',
    'ts', now_s)

  publish_completion(eid, core.flow_id, 'success')
  return ok('completed')
end)
