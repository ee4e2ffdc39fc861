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

-- An empty list to unpack where an optional tail of arguments is absent
-- (never written to).
xh.NONE = {}

-- True when an idempotency KEYS slot names a real key (not the noop slot).
function xh.real_idem_key(k)
  return k ~= nil and k ~= '' and not string.find(k, 'ff:noop:', 1, true)
end

-- The tags JSON object of a create as HSET pairs (any count: the caller
-- writes them in chunks), decoded before the first write. As upstream,
-- text that is not a JSON object is no tags and a non-string value is
-- tostring'd.
function xh.tags_flat(tags_json)
  local flat = {}
  if not is_set(tags_json) or tags_json == '{}' then
    return flat
  end
  local decoded, tags = pcall(cjson.decode, tags_json)
  if decoded and type(tags) == 'table' then
    for k, v in pairs(tags) do
      flat[#flat + 1] = k
      flat[#flat + 1] = tostring(v)
    end
  end
  return flat
end

-- ff_create_execution
-- KEYS: core, payload, policy, tags, scheduling zset (eligible|delayed),
--       idem key (or ff:noop:<tag>), execution_deadline, all_executions
-- ARGV: eid, namespace, lane_id, kind, priority, creator, policy_json,
--       payload, delay_until, dedup_ttl_ms, tags_json, deadline_at,
--       partition_id
redis.register_function('ff_create_execution', with_keys(8, function(keys, args)
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
    -- A pre-minted id sent again: the same payload is a retry, another
    -- one a different execution under a taken id (README.md, "Bad input").
    if (redis.call('GET', keys[2]) or '') ~= (args[8] or '') then
      return err('execution_conflict', 'payload differs from the existing execution')
    end
    return ok_status('DUPLICATE', eid)
  end

  -- Every check happens before the first write.
  local caps_csv, cerr = xh.required_caps(args[7])
  if caps_csv == false then return cerr end
  local tags_flat = xh.tags_flat(args[11])
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

  -- One number-to-string conversion of the clock, not three.
  local now_s = num_str(now)
  redis.call('HSET', keys[1],
    'execution_id', eid,
    'namespace', args[2] or '',
    'lane_id', lane,
    'execution_kind', args[4] or '',
    'partition_id', args[13] or '',
    'priority', num_arg_str(priority),
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
    'created_at', now_s,
    'started_at', '',
    'completed_at', '',
    'last_transition_at', now_s,
    'last_mutation_at', now_s,
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
    'flow_id', '',
    -- required_capabilities last, in the same HSET (one write per key).
    unpack(caps_csv and {'required_capabilities', caps_csv} or xh.NONE))

  if is_set(args[8]) then
    redis.call('SET', keys[2], args[8])
  end
  if is_set(args[7]) then
    redis.call('SET', keys[3], args[7])
  end

  call_chunked('HSET', keys[4], tags_flat)

  if delayed then
    redis.call('ZADD', keys[5], delay_n, eid)
  else
    -- A caller that set delay_until passes the delayed index in KEYS[5];
    -- when that time has already passed on the server clock the execution
    -- is eligible now and must land in the eligible index, or no scanner
    -- would ever find it (the promoter drops non-delayed members).
    local sched_key = keys[5]
    if string.sub(sched_key, -8) == ':delayed' then
      sched_key = string.sub(sched_key, 1, -8) .. 'eligible'
    end
    redis.call('ZADD', sched_key, num_arg_str(0 - (priority * PRIORITY_FACTOR) + now), eid)
  end
  redis.call('SADD', keys[8], eid)
  if deadline_n then
    redis.call('ZADD', keys[7], deadline_n, eid)
  end

  local ttl = tonumber(args[10]) or 0
  if ttl > 0 and xh.real_idem_key(keys[6]) then
    redis.call('SET', keys[6], eid, 'PX', ttl)
  end

  return ok(eid, public)
end))

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

-- The exec_core fields ff_claim_execution reads (HMGET, not HGETALL).
xh.CLAIM_FIELDS = {
  'lifecycle_phase', 'ownership_state', 'eligibility_state', 'terminal_outcome',
  'attempt_state', 'current_lease_epoch', 'total_attempt_count', 'started_at',
  'pending_retry_reason', 'pending_previous_attempt_index', 'pending_replay_reason',
  'pending_replay_requested_by',
}

-- The claim-grant fields a claim checks.
xh.GRANT_FIELDS = {'worker_id', 'grant_expires_at'}

-- The exec_core fields of xh.leased_core's callers: LEASE_FIELDS, the
-- retry count (fail) and created_at (wait for children).
xh.LEASED_FIELDS = {
  'lifecycle_phase', 'ownership_state', 'eligibility_state', 'terminal_outcome',
  'current_lease_id', 'current_lease_epoch', 'current_attempt_id', 'current_attempt_index',
  'current_worker_id', 'current_worker_instance_id', 'lease_expires_at', 'flow_id',
  'retry_count', 'created_at',
}

-- ff_claim_execution
-- KEYS: core, claim_grant, lane eligible, lease_expiry, worker_leases,
--       attempt hash, attempt usage, attempt policy (6-8 informational),
--       attempts, lease_current, lease_history, lane active,
--       attempt_timeout, execution_deadline
-- ARGV: eid, worker_id, worker_instance_id, lane, capability_hash,
--       lease_id, lease_ttl_ms, renew_before_ms, attempt_id,
--       attempt_policy_json, attempt_timeout_ms, execution_deadline_at
redis.register_function('ff_claim_execution', with_keys(14, function(keys, args)
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

  local core = hash_fields_or_nil(keys[1], xh.CLAIM_FIELDS)
  if not core then return err('execution_not_found') end
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

  -- An absent grant reads worker_id nil: invalid_claim_grant either way.
  local grant = hash_fields(keys[2], xh.GRANT_FIELDS)
  if grant.worker_id ~= worker_id then return err('invalid_claim_grant') end
  if is_set(grant.grant_expires_at) and (tonumber(grant.grant_expires_at) or 0) < now then
    return err('claim_grant_expired')
  end
  redis.call('DEL', keys[2])

  local epoch = (tonumber(core.current_lease_epoch) or 0) + 1
  local idx = tonumber(core.total_attempt_count) or 0
  local expires = now + ttl
  local renew_deadline = now + renew_before
  local now_s, epoch_s, idx_s = num_str(now), num_str(epoch), num_str(idx)
  local expires_s, renew_s = num_str(expires), num_str(renew_deadline)

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
  redis.call('HSET', att,
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
    unpack(lineage))
  redis.call('ZADD', keys[9], now_s, idx_s)
  redis.call('HSET', keyfmt.attempt(tag, eid, idx, 'usage'), 'last_usage_report_seq', '0')
  if policy_flat then
    call_chunked('HSET', keyfmt.attempt(tag, eid, idx, 'policy'), policy_flat)
  end

  write_lease_current(keys[10], {
    lease_id = lease_id, lease_epoch = epoch_s, execution_id = eid,
    attempt_id = attempt_id, worker_id = worker_id, worker_instance_id = wiid,
    acquired_at = now_s, expires_at = expires_s, renewal_deadline = renew_s,
  })

  -- CLAIMED_VECTOR, then the lease and attempt fields, in one HSET.
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
    'total_attempt_count', num_str(idx + 1),
    'current_attempt_id', attempt_id,
    'current_lease_id', lease_id,
    'current_lease_epoch', epoch_s,
    'current_worker_id', worker_id,
    'current_worker_instance_id', wiid,
    'current_lane', args[4] or '',
    'lease_acquired_at', now_s,
    'lease_expires_at', expires_s,
    'lease_last_renewed_at', now_s,
    'lease_renewal_deadline', renew_s,
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

  return ok(lease_id, epoch_s, expires_s, attempt_id, idx_s, attempt_type)
end))

-- ff_complete_execution
-- KEYS: core, attempt hash, lease_expiry, worker_leases, lane terminal,
--       lease_current, lease_history, lane active, stream_meta, result,
--       attempt_timeout, execution_deadline
-- ARGV: eid, lease_id, lease_epoch, attempt_id, result_payload, [source]
redis.register_function('ff_complete_execution', with_keys(12, function(keys, args)
  local eid = args[1] or ''
  local payload = args[5] or ''
  local now = now_ms()

  local core = lease_core_or_nil(keys[1])
  if not core then return err('execution_not_found') end
  local fence, ferr = xh.fence_or_override(core, args[2], args[3], args[4], args[6] or '')
  if not fence then return ferr end
  local lerr = check_lease(core, fence, now, keys[1], keys[7])
  if lerr then return lerr end

  local now_s = num_str(now)
  redis.call('HSET', keys[2], 'attempt_state', 'ended_success', 'ended_at', now_s)
  if redis.call('EXISTS', keys[9]) == 1 then
    redis.call('HSET', keys[9], 'closed_at', now_s, 'closed_reason', 'attempt_success')
  end
  if payload ~= '' then
    redis.call('SET', keys[10], payload)
  end

  -- The terminal vector, LEASE_CLEAR_FIELDS, then the clock: one HSET.
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'terminal',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', 'success',
    'attempt_state', 'attempt_terminal',
    'public_state', 'completed',
    'completed_at', now_s,
    'current_lease_id', '', 'current_worker_id', '', 'current_worker_instance_id', '',
    'lease_expires_at', '', 'lease_last_renewed_at', '', 'lease_renewal_deadline', '',
    'lease_expired_at', '', 'lease_revoked_at', '', 'lease_revoke_reason', '',
    'last_transition_at', now_s,
    'last_mutation_at', now_s)

  redis.call('ZREM', keys[3], eid)
  redis.call('SREM', keys[4], eid)
  redis.call('ZADD', keys[5], now_s, eid)
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
end))

-- Closes a hash-backed record when it exists (HSET of the given pairs).
function xh.close_if_exists(key, ...)
  if key and key ~= '' and redis.call('EXISTS', key) == 1 then
    redis.call('HSET', key, ...)
  end
end

-- ff_cancel_execution
-- KEYS: core, attempt hash, stream_meta, lease_current, lease_history,
--       lease_expiry, worker_leases(holder), suspension_current, waitpoint,
--       waitpoint condition, suspension_timeout, lane terminal,
--       attempt_timeout, execution_deadline, lane eligible, lane delayed,
--       lane blocked:{dependencies,budget,quota,route,operator}
-- ARGV: eid, reason, source, lease_id, lease_epoch
redis.register_function('ff_cancel_execution', with_keys(21, function(keys, args)
  local eid = args[1] or ''
  local reason = args[2] or ''
  local source = args[3] or ''
  local lease_id = args[4] or ''
  local lease_epoch = args[5] or ''
  local now = now_ms()

  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase == 'terminal' then
    return err('execution_not_active', core.terminal_outcome or '',
      core.current_lease_epoch or '', 'terminal', core.current_attempt_id or '')
  end

  local tag = keyfmt.tag(keys[1])
  local lane = core.lane_id or 'default'
  local phase = core.lifecycle_phase
  local now_s = num_str(now)
  local has_attempt = is_set(core.current_attempt_index)

  if phase == 'active' then
    if source ~= 'operator_override' then
      if core.ownership_state == 'lease_revoked' then return err('lease_revoked') end
      if is_set(lease_id) and (core.current_lease_id ~= lease_id
          or core.current_lease_epoch ~= lease_epoch) then
        return err('stale_lease')
      end
    end
  end

  if phase == 'active' or phase == 'suspended' then
    if has_attempt then
      redis.call('HSET', keys[2], 'attempt_state', 'ended_cancelled', 'ended_at', now_s,
        'failure_reason', 'cancelled: ' .. reason)
    end
    xh.close_if_exists(keys[3], 'closed_at', now_s, 'closed_reason', 'attempt_cancelled')
  end

  if phase == 'active' then
    redis.call('DEL', keys[4])
    history_add(keys[5],
      'event', 'released',
      'lease_id', core.current_lease_id or '',
      'lease_epoch', core.current_lease_epoch or '',
      'attempt_index', core.current_attempt_index or '',
      'reason', 'cancelled',
      'ts', now_s)
  elseif phase == 'suspended' then
    local extra = redis.call('HGET', keys[8], 'additional_waitpoints_json')
    xh.close_if_exists(keys[8], 'closed_at', now_s, 'close_reason', 'cancelled')
    xh.close_if_exists(keys[9], 'state', 'closed', 'closed_at', now_s, 'close_reason', 'cancelled')
    xh.close_if_exists(keys[10], 'closed', '1', 'closed_at', now_s, 'closed_reason', 'cancelled')
    redis.call('DEL', keys[8] .. ':satisfied_set', keys[8] .. ':satisfied_set:signals',
      keys[8] .. ':member_map')
    if is_set(extra) then
      local decoded, list = pcall(cjson.decode, extra)
      if decoded and type(list) == 'table' then
        for _, wp in ipairs(list) do
          if type(wp) == 'table' and type(wp.waitpoint_id) == 'string' and wp.waitpoint_id ~= '' then
            local wp_key = 'ff:wp:' .. tag .. ':' .. wp.waitpoint_id
            xh.close_if_exists(wp_key, 'state', 'closed', 'closed_at', now_s, 'close_reason', 'cancelled')
            xh.close_if_exists(wp_key .. ':condition', 'closed', '1', 'closed_at', now_s,
              'closed_reason', 'cancelled')
          end
        end
      end
    end
  end

  redis.call('HSET', keys[1],
    'lifecycle_phase', 'terminal',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', 'cancelled',
    'attempt_state', has_attempt and 'attempt_terminal' or (core.attempt_state or 'none'),
    'public_state', 'cancelled',
    'cancellation_reason', reason,
    'cancelled_by', source ~= '' and source or eid,
    'completed_at', now_s,
    'current_lease_id', '',
    'current_worker_id', '',
    'current_worker_instance_id', '',
    'lease_expires_at', '',
    'lease_last_renewed_at', '',
    'lease_renewal_deadline', '',
    'current_suspension_id', '',
    'current_waitpoint_id', '',
    'last_transition_at', now_s,
    'last_mutation_at', now_s)

  zrem_indexes(eid, {
    keys[15], keys[16], keyfmt.lane(tag, lane, 'active'), keyfmt.lane(tag, lane, 'suspended'),
    keys[17], keys[18], keys[19], keys[20], keys[21],
    keys[6], keys[11], keys[13], keys[14],
  }, keys[7], keys[12])
  redis.call('ZADD', keys[12], now, eid)

  if source ~= 'flow_cascade' then
    publish_completion(eid, core.flow_id, 'cancelled')
  end
  return ok('cancelled', phase)
end))

-- Shared body of ff_delay_execution and ff_move_to_waiting_children: reads
-- the core, resolves the fence and validates the lease. Returns core and
-- fence, or nil plus the error reply.
function xh.leased_core(keys, lease_id, lease_epoch, attempt_id, source, now, history_key)
  local core = hash_fields_or_nil(keys[1], xh.LEASED_FIELDS)
  if not core then return nil, err('execution_not_found') end
  local fence, ferr = xh.fence_or_override(core, lease_id, lease_epoch, attempt_id, source)
  if not fence then return nil, ferr end
  local lerr = check_lease(core, fence, now, keys[1], history_key)
  if lerr then return nil, lerr end
  return core, fence
end

-- Fields cleared on exec_core when a worker hands its lease back without
-- ending the execution (delay, wait for children, fail).
xh.RELEASE_CLEAR = {
  'current_lease_id', '', 'current_worker_id', '', 'current_worker_instance_id', '',
  'lease_expires_at', '', 'lease_last_renewed_at', '', 'lease_renewal_deadline', '',
}

-- ff_delay_execution
-- KEYS: core, attempt hash, lease_current, lease_history, lease_expiry,
--       worker_leases, lane active, lane delayed, attempt_timeout
-- ARGV: eid, lease_id, lease_epoch, attempt_id, delay_until, [source]
redis.register_function('ff_delay_execution', with_keys(9, function(keys, args)
  local until_n, nerr = num_arg(args[5], 'delay_until')
  if not until_n then return nerr end
  local eid = args[1] or ''
  local delay_until = args[5]
  local now = now_ms()

  local core, fence = xh.leased_core(keys, args[2], args[3], args[4], args[6] or '', now, keys[4])
  if not core then return fence end

  local now_s = num_str(now)
  hset_pairs(keys[1], {
    'lifecycle_phase', 'runnable',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_eligible_until_time',
    'blocking_reason', 'waiting_for_delay',
    'blocking_detail', 'delayed until ' .. delay_until,
    'terminal_outcome', 'none',
    'attempt_state', 'attempt_interrupted',
    'public_state', 'delayed',
    'delay_until', delay_until,
  }, xh.RELEASE_CLEAR, {
    'last_transition_at', now_s,
    'last_mutation_at', now_s,
  })
  redis.call('HSET', keys[2], 'attempt_state', 'suspended', 'suspended_at', now_s,
    'suspension_id', 'worker_delay')

  redis.call('DEL', keys[3])
  redis.call('ZREM', keys[5], eid)
  redis.call('SREM', keys[6], eid)
  redis.call('ZREM', keys[7], eid)
  redis.call('ZREM', keys[9], eid)
  redis.call('ZADD', keys[8], until_n, eid)
  history_add(keys[4],
    'event', 'released',
    'lease_id', fence.lease_id,
    'lease_epoch', fence.lease_epoch,
    'attempt_index', core.current_attempt_index or '',
    'attempt_id', fence.attempt_id,
    'reason', 'worker_delay',
    'ts', now_s)
  return ok(delay_until)
end))

-- ff_move_to_waiting_children
-- KEYS: core, attempt hash, lease_current, lease_history, lease_expiry,
--       worker_leases, lane active, lane blocked:dependencies,
--       attempt_timeout
-- ARGV: eid, lease_id, lease_epoch, attempt_id, [source]
redis.register_function('ff_move_to_waiting_children', with_keys(9, function(keys, args)
  local eid = args[1] or ''
  local now = now_ms()

  local core, fence = xh.leased_core(keys, args[2], args[3], args[4], args[5] or '', now, keys[4])
  if not core then return fence end

  local now_s = num_str(now)
  hset_pairs(keys[1], {
    'lifecycle_phase', 'runnable',
    'ownership_state', 'unowned',
    'eligibility_state', 'blocked_by_dependencies',
    'blocking_reason', 'waiting_for_children',
    'blocking_detail', 'waiting for child executions to complete',
    'terminal_outcome', 'none',
    'attempt_state', 'attempt_interrupted',
    'public_state', 'waiting_children',
  }, xh.RELEASE_CLEAR, {
    'last_transition_at', now_s,
    'last_mutation_at', now_s,
  })
  redis.call('HSET', keys[2], 'attempt_state', 'suspended', 'suspended_at', now_s,
    'suspension_id', 'waiting_children')

  redis.call('DEL', keys[3])
  redis.call('ZREM', keys[5], eid)
  redis.call('SREM', keys[6], eid)
  redis.call('ZREM', keys[7], eid)
  redis.call('ZREM', keys[9], eid)
  history_add(keys[4],
    'event', 'released',
    'lease_id', fence.lease_id,
    'lease_epoch', fence.lease_epoch,
    'attempt_index', core.current_attempt_index or '',
    'attempt_id', fence.attempt_id,
    'reason', 'waiting_children',
    'ts', now_s)
  redis.call('ZADD', keys[8], tonumber(core.created_at) or 0, eid)
  return ok()
end))

-- Retry decision of ff_fail_execution. Returns (true, backoff_ms) when a
-- retry is due, else false. max_retries defaults to 0; backoff is
-- exponential min(initial*mult^retry_count, max), fixed delay_ms, or 1000,
-- rounded to whole milliseconds.
function xh.retry_backoff(policy_json, retry_count)
  if not is_set(policy_json) then return false end
  local decoded, policy = pcall(cjson.decode, policy_json)
  if not decoded or type(policy) ~= 'table' then return false end
  local max_retries = tonumber(policy.max_retries) or 0
  if not (retry_count < max_retries) then return false end
  local bt = policy.backoff
  if type(bt) ~= 'table' then bt = {} end
  local backoff = 1000
  if bt.type == 'exponential' then
    local initial = tonumber(bt.initial_delay_ms) or 1000
    local max_delay = tonumber(bt.max_delay_ms) or 60000
    local mult = tonumber(bt.multiplier) or 2
    backoff = math.min(initial * (mult ^ retry_count), max_delay)
  elseif bt.type == 'fixed' then
    backoff = tonumber(bt.delay_ms) or 1000
  end
  return true, math.floor(backoff + 0.5)
end

-- ff_fail_execution
-- KEYS: core, attempt hash, lease_expiry, worker_leases, lane terminal,
--       lane delayed, lease_current, lease_history, lane active,
--       stream_meta, attempt_timeout, execution_deadline
-- ARGV: eid, lease_id, lease_epoch, attempt_id, failure_reason,
--       failure_category, retry_policy_json, [source]
redis.register_function('ff_fail_execution', with_keys(12, function(keys, args)
  local eid = args[1] or ''
  local reason = args[5] or ''
  local category = args[6] or ''
  local now = now_ms()

  local core, fence = xh.leased_core(keys, args[2], args[3], args[4], args[8] or '', now, keys[8])
  if not core then return fence end

  local now_s = num_str(now)
  redis.call('HSET', keys[2], 'attempt_state', 'ended_failure', 'ended_at', now_s,
    'failure_reason', reason, 'failure_category', category)
  xh.close_if_exists(keys[10], 'closed_at', now_s, 'closed_reason', 'attempt_failure')

  local retry_count = tonumber(core.retry_count) or 0
  local retry, backoff = xh.retry_backoff(args[7], retry_count)

  if retry then
    local delay_until = now + backoff
    local until_s = tostring(delay_until)
    hset_pairs(keys[1], {
      'lifecycle_phase', 'runnable',
      'ownership_state', 'unowned',
      'eligibility_state', 'not_eligible_until_time',
      'blocking_reason', 'waiting_for_retry_backoff',
      'blocking_detail', 'retry backoff until ' .. until_s .. ' (attempt '
        .. (core.current_attempt_index or '0') .. ' failed: ' .. reason .. ')',
      'terminal_outcome', 'none',
      'attempt_state', 'pending_retry_attempt',
      'public_state', 'delayed',
      'pending_retry_reason', reason,
      'pending_previous_attempt_index', core.current_attempt_index or '0',
      'retry_count', tostring(retry_count + 1),
      'current_attempt_id', '',
    }, xh.RELEASE_CLEAR, {
      'delay_until', until_s,
      'failure_reason', reason,
      'last_transition_at', now_s,
      'last_mutation_at', now_s,
    })
    redis.call('DEL', keys[7])
    redis.call('ZREM', keys[3], eid)
    redis.call('SREM', keys[4], eid)
    redis.call('ZREM', keys[9], eid)
    redis.call('ZREM', keys[11], eid)
    redis.call('ZADD', keys[6], delay_until, eid)
    history_add(keys[8],
      'event', 'released',
      'lease_id', fence.lease_id,
      'lease_epoch', fence.lease_epoch,
      'attempt_index', core.current_attempt_index or '',
      'reason', 'failed_retry_scheduled',
      'ts', now_s)
    return ok('retry_scheduled', until_s)
  end

  hset_pairs(keys[1], {
    'lifecycle_phase', 'terminal',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', 'failed',
    'attempt_state', 'attempt_terminal',
    'public_state', 'failed',
    'failure_reason', reason,
    'completed_at', now_s,
  }, xh.RELEASE_CLEAR, {
    'last_transition_at', now_s,
    'last_mutation_at', now_s,
  })
  redis.call('DEL', keys[7])
  redis.call('ZREM', keys[3], eid)
  redis.call('SREM', keys[4], eid)
  redis.call('ZREM', keys[9], eid)
  redis.call('ZREM', keys[11], eid)
  redis.call('ZREM', keys[12], eid)
  redis.call('ZADD', keys[5], now, eid)
  history_add(keys[8],
    'event', 'released',
    'lease_id', fence.lease_id,
    'lease_epoch', fence.lease_epoch,
    'attempt_index', core.current_attempt_index or '',
    'reason', 'failed_terminal',
    'ts', now_s)
  publish_completion(eid, core.flow_id, 'failed')
  return ok('terminal_failed')
end))

-- ff_reclaim_execution
-- KEYS: core, claim_grant, old attempt hash, old stream_meta, new attempt
--       hash, new attempt usage, attempts, lease_current, lease_history,
--       lease_expiry, worker_leases(new worker), lane active,
--       attempt_timeout, execution_deadline
-- ARGV: eid, worker_id, worker_instance_id, lane, lease_id, lease_ttl_ms,
--       attempt_id, attempt_policy_json (unused), [default_max_reclaim_count]
redis.register_function('ff_reclaim_execution', with_keys(14, function(keys, args)
  local ttl, terr = num_arg(args[6], 'lease_ttl_ms')
  if not ttl then return terr end
  local max_reclaim = 100
  if args[9] ~= nil then
    local m, merr = num_arg(args[9], 'default_max_reclaim_count')
    if not m then return merr end
    max_reclaim = m
  end

  local eid = args[1] or ''
  local worker_id = args[2] or ''
  local wiid = args[3] or ''
  local lease_id = args[5] or ''
  local attempt_id = args[7] or ''
  local now = now_ms()

  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'active' then return err('execution_not_reclaimable') end
  if core.ownership_state ~= 'lease_expired_reclaimable'
      and core.ownership_state ~= 'lease_revoked' then
    return err('execution_not_reclaimable')
  end

  local policy_raw = redis.call('GET', keyfmt.policy_of_core(keys[1]))
  if policy_raw then
    local decoded, policy = pcall(cjson.decode, policy_raw)
    if decoded and type(policy) == 'table' and tonumber(policy.max_reclaim_count) then
      max_reclaim = tonumber(policy.max_reclaim_count)
    end
  end

  local tag = keyfmt.tag(keys[1])
  local reclaims = tonumber(core.lease_reclaim_count) or 0
  local old_wiid = core.current_worker_instance_id or ''
  local now_s = num_str(now)

  if reclaims >= max_reclaim then
    redis.call('HSET', keys[1],
      'lifecycle_phase', 'terminal',
      'ownership_state', 'unowned',
      'eligibility_state', 'not_applicable',
      'blocking_reason', 'none',
      'blocking_detail', '',
      'terminal_outcome', 'failed',
      'attempt_state', 'attempt_terminal',
      'public_state', 'failed',
      'failure_reason', 'max_reclaims_exceeded',
      'completed_at', now_s,
      'current_lease_id', '',
      'current_worker_id', '',
      'current_worker_instance_id', '',
      'last_transition_at', now_s,
      'last_mutation_at', now_s)
    redis.call('DEL', keys[8])
    redis.call('ZREM', keys[10], eid)
    redis.call('SREM', keys[11], eid)
    if old_wiid ~= '' then
      redis.call('SREM', keyfmt.worker_leases(tag, old_wiid), eid)
    end
    redis.call('ZREM', keys[12], eid)
    redis.call('ZREM', keys[13], eid)
    redis.call('ZREM', keys[14], eid)
    local lane = core.lane_id or core.current_lane or 'default'
    redis.call('ZADD', keyfmt.lane(tag, lane, 'terminal'), now, eid)
    return err('max_retries_exhausted', tostring(max_reclaim))
  end

  local grant = hash_table(keys[2])
  if next(grant) == nil or grant.worker_id ~= worker_id then
    return err('invalid_claim_grant')
  end
  redis.call('DEL', keys[2])

  local cause = 'lease_' .. (core.ownership_state or 'expired')
  local old_idx = core.current_attempt_index or '0'
  redis.call('HSET', keys[3], 'attempt_state', 'interrupted_reclaimed', 'ended_at', now_s,
    'failure_reason', cause)
  xh.close_if_exists(keys[4], 'closed_at', now_s, 'closed_reason', 'reclaimed')

  local epoch = (tonumber(core.current_lease_epoch) or 0) + 1
  local idx = tonumber(core.total_attempt_count) or 0
  local expires = now + ttl
  local renew_deadline = now + math.floor(ttl * 2 / 3)
  local epoch_s, idx_s = tostring(epoch), tostring(idx)

  redis.call('HSET', keyfmt.attempt(tag, eid, idx),
    'attempt_id', attempt_id,
    'execution_id', eid,
    'attempt_index', idx_s,
    'attempt_type', 'reclaim',
    'attempt_state', 'started',
    'created_at', now_s,
    'started_at', now_s,
    'lease_id', lease_id,
    'lease_epoch', epoch_s,
    'worker_id', worker_id,
    'worker_instance_id', wiid,
    'reclaim_reason', cause,
    'previous_attempt_index', old_idx)
  redis.call('ZADD', keys[7], now, idx_s)
  redis.call('HSET', keyfmt.attempt(tag, eid, idx, 'usage'), 'last_usage_report_seq', '0')

  write_lease_current(keys[8], {
    lease_id = lease_id, lease_epoch = epoch_s, execution_id = eid,
    attempt_id = attempt_id, worker_id = worker_id, worker_instance_id = wiid,
    acquired_at = now_s, expires_at = tostring(expires), renewal_deadline = tostring(renew_deadline),
  })

  hset_pairs(keys[1], CLAIMED_VECTOR, {
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
    'lease_expired_at', '',
    'lease_revoked_at', '',
    'lease_revoke_reason', '',
    'lease_reclaim_count', tostring(reclaims + 1),
    'last_transition_at', now_s,
    'last_mutation_at', now_s,
  })

  redis.call('ZADD', keys[10], expires, eid)
  if old_wiid ~= '' and old_wiid ~= wiid then
    redis.call('SREM', keyfmt.worker_leases(tag, old_wiid), eid)
  end
  redis.call('SADD', keys[11], eid)
  redis.call('ZADD', keys[12], expires, eid)
  history_add(keys[9],
    'event', 'reclaimed',
    'old_lease_epoch', core.current_lease_epoch or '',
    'new_lease_id', lease_id,
    'new_lease_epoch', epoch_s,
    'new_attempt_id', attempt_id,
    'new_attempt_index', idx_s,
    'worker_id', worker_id,
    'ts', now_s)

  return ok(lease_id, epoch_s, tostring(expires), attempt_id, idx_s, 'reclaim')
end))

-- ff_expire_execution
-- KEYS: core, attempt hash, stream_meta, lease_current, lease_history,
--       lease_expiry, worker_leases, lane active, lane terminal,
--       attempt_timeout, execution_deadline, lane suspended,
--       suspension_timeout, suspension_current
-- ARGV: eid, expire_reason (attempt_timeout | execution_deadline)
redis.register_function('ff_expire_execution', with_keys(14, function(keys, args)
  local eid = args[1] or ''
  local reason = args[2] or 'attempt_timeout'
  local now = now_ms()

  local core = hash_table(keys[1])
  if next(core) == nil then
    redis.call('ZREM', keys[10], eid)
    redis.call('ZREM', keys[11], eid)
    return ok('not_found_cleaned')
  end
  if core.lifecycle_phase == 'terminal' then
    redis.call('ZREM', keys[10], eid)
    redis.call('ZREM', keys[11], eid)
    return ok('already_terminal')
  end

  local tag = keyfmt.tag(keys[1])
  local phase = core.lifecycle_phase
  local now_s = num_str(now)
  local has_attempt = is_set(core.current_attempt_index)

  if phase == 'active' then
    if has_attempt then
      redis.call('HSET', keys[2], 'attempt_state', 'ended_failure', 'ended_at', now_s,
        'failure_reason', reason)
    end
    xh.close_if_exists(keys[3], 'closed_at', now_s, 'closed_reason', 'expired')
    redis.call('DEL', keys[4])
    redis.call('ZREM', keys[6], eid)
    redis.call('SREM', keys[7], eid)
    local wiid = core.current_worker_instance_id or ''
    if wiid ~= '' then
      redis.call('SREM', keyfmt.worker_leases(tag, wiid), eid)
    end
    redis.call('ZREM', keys[8], eid)
    history_add(keys[5],
      'event', 'released',
      'lease_id', core.current_lease_id or '',
      'lease_epoch', core.current_lease_epoch or '',
      'attempt_index', core.current_attempt_index or '',
      'reason', 'expired:' .. reason,
      'ts', now_s)
  elseif phase == 'suspended' then
    if has_attempt then
      redis.call('HSET', keys[2], 'attempt_state', 'ended_failure', 'ended_at', now_s,
        'failure_reason', reason)
    end
    xh.close_if_exists(keys[14], 'closed_at', now_s, 'close_reason', 'expired:' .. reason)
    xh.close_if_exists(keys[3], 'closed_at', now_s, 'closed_reason', 'expired')
    redis.call('ZREM', keys[12], eid)
    redis.call('ZREM', keys[13], eid)
  elseif phase == 'runnable' then
    local idx = lane_index_keys(tag, core.lane_id or core.current_lane or 'default')
    local by_state = {
      eligible_now = idx.eligible,
      not_eligible_until_time = idx.delayed,
      blocked_by_dependencies = idx.blocked_dependencies,
      blocked_by_budget = idx.blocked_budget,
      blocked_by_quota = idx.blocked_quota,
      blocked_by_route = idx.blocked_route,
      blocked_by_operator = idx.blocked_operator,
    }
    local one = by_state[core.eligibility_state or '']
    if one then
      redis.call('ZREM', one, eid)
    else
      for _, k in ipairs({idx.eligible, idx.delayed, idx.blocked_dependencies, idx.blocked_budget,
          idx.blocked_quota, idx.blocked_route, idx.blocked_operator}) do
        redis.call('ZREM', k, eid)
      end
    end
  end

  redis.call('HSET', keys[1],
    'lifecycle_phase', 'terminal',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', 'expired',
    'attempt_state', has_attempt and 'attempt_terminal' or (core.attempt_state or 'none'),
    'public_state', 'expired',
    'failure_reason', reason,
    'completed_at', now_s,
    'current_lease_id', '',
    'current_worker_id', '',
    'current_worker_instance_id', '',
    'lease_expires_at', '',
    'current_suspension_id', '',
    'current_waitpoint_id', '',
    'last_transition_at', now_s,
    'last_mutation_at', now_s)
  redis.call('ZREM', keys[10], eid)
  redis.call('ZREM', keys[11], eid)
  redis.call('ZADD', keys[9], now, eid)

  publish_completion(eid, core.flow_id, 'expired')
  return ok('expired', phase)
end))

-- ff_set_execution_tags
-- KEYS: core, tags
-- ARGV: k1, v1, k2, v2, ... (keys must look like <caller>.<field>)
redis.register_function('ff_set_execution_tags', with_keys(2, function(keys, args)
  local n = #args
  if n == 0 or n % 2 ~= 0 then
    return err('invalid_input', 'tags must be non-empty even-length key/value pairs')
  end
  if redis.call('EXISTS', keys[1]) == 0 then
    return err('execution_not_found')
  end
  for i = 1, n, 2 do
    if not string.find(args[i], '^[a-z][a-z0-9_]*%.[^.]') then
      return err('invalid_tag_key', args[i])
    end
  end
  call_chunked('HSET', keys[2], args)
  redis.call('HSET', keys[1], 'last_mutation_at', tostring(now_ms()))
  return ok(tostring(n / 2))
end))
