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
