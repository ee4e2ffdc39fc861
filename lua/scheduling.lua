-- Scheduling family: claim grants, priority, the worker registry, progress,
-- delayed promotion, reclaim grants and the operator grant-and-claim.
--
-- Family-local helpers live in one table so the shared chunk stays far
-- below Lua's 200-local limit.
local sched = {}

-- Capability CSV to set. Unlike the shared parse_caps, every non-empty
-- token counts toward the 256 cap (duplicates included), which is how
-- FlowFabric's scheduler counts. Returns set or nil plus the
-- invalid_capabilities reply.
function sched.caps_set(csv, kind)
  local set = {}
  if csv == nil or csv == false or csv == '' then return set end
  if #csv > CAPS_MAX_BYTES then
    return nil, err('invalid_capabilities', kind .. ':too_many_bytes')
  end
  local count = 0
  for tok in string.gmatch(csv, '[^,]+') do
    count = count + 1
    if count > CAPS_MAX_TOKENS then
      return nil, err('invalid_capabilities', kind .. ':too_many_tokens')
    end
    set[tok] = true
  end
  return set
end

-- Capability gate shared by the two grant issuers. Returns nil when the
-- worker may take the execution, else the reply to return. A mismatch
-- stamps last_capability_mismatch_at on the core first (no rollback).
function sched.caps_gate(core_key, core, worker_csv, now)
  local required, e1 = sched.caps_set(core.required_capabilities, 'required')
  if not required then return e1 end
  local worker, e2 = sched.caps_set(worker_csv, 'worker')
  if not worker then return e2 end
  if next(required) == nil then return nil end
  local missing = missing_caps(required, worker)
  if missing ~= '' then
    redis.call('HSET', core_key, 'last_capability_mismatch_at', tostring(now))
    return err('capability_mismatch', missing)
  end
  return nil
end

-- Writes the claim-grant hash (fields in FlowFabric's order).
function sched.write_grant(key, worker_id, wiid, lane, cap_hash, route, admission, now, expires)
  redis.call('HSET', key,
    'worker_id', worker_id,
    'worker_instance_id', wiid,
    'lane_id', lane,
    'capability_hash', cap_hash,
    'route_snapshot_json', route,
    'admission_summary', admission,
    'created_at', tostring(now),
    'grant_expires_at', tostring(expires))
end

-- PEXPIREAT/PEXPIRE need integers; a fractional caller TTL is floored.
function sched.int(n)
  return string.format('%d', math.floor(n))
end

-- Reads the core or returns nil (missing key).
function sched.core(key)
  local c = hash_table(key)
  if next(c) == nil then return nil end
  return c
end

-- Flattens an attempt-policy JSON object into HSET pairs: one field per
-- top-level key, nested values JSON-encoded, scalars via tostring.
-- Returns pairs or nil when the JSON does not decode to an object.
function sched.flatten_policy(json)
  local okd, decoded = pcall(cjson.decode, json)
  if not okd or type(decoded) ~= 'table' then return nil end
  local out = {}
  for k, v in pairs(decoded) do
    out[#out + 1] = tostring(k)
    if type(v) == 'table' then
      out[#out + 1] = cjson.encode(v)
    else
      out[#out + 1] = tostring(v)
    end
  end
  return out
end

-- The exec_core fields ff_issue_claim_grant reads (the capability gate
-- reads required_capabilities).
sched.GRANT_CORE_FIELDS = {'lifecycle_phase', 'eligibility_state', 'required_capabilities'}

-- ff_issue_claim_grant
-- KEYS: exec_core, claim_grant, lane_eligible
-- ARGV: execution_id, worker_id, worker_instance_id, lane_id,
--       capability_hash, grant_ttl_ms, route_snapshot_json,
--       admission_summary, worker_capabilities_csv
redis.register_function('ff_issue_claim_grant', with_keys(3, function(keys, args)
  local ttl, bad = num_arg(args[6], 'grant_ttl_ms')
  if not ttl then return bad end
  local eid = args[1] or ''
  local now = now_ms()

  local core = hash_fields_or_nil(keys[1], sched.GRANT_CORE_FIELDS)
  if not core then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' or core.eligibility_state ~= 'eligible_now' then
    return err('execution_not_eligible')
  end
  if redis.call('EXISTS', keys[2]) == 1 then
    return err('grant_already_exists')
  end
  if not redis.call('ZSCORE', keys[3], eid) then
    return err('execution_not_in_eligible_set')
  end
  local gate = sched.caps_gate(keys[1], core, args[9], now)
  if gate then return gate end

  local expires = now + ttl
  sched.write_grant(keys[2], args[2] or '', args[3] or '', args[4] or '',
    args[5] or '', args[7] or '', args[8] or '', now, expires)
  redis.call('PEXPIREAT', keys[2], sched.int(expires))
  -- The execution stays in the eligible set: the claim removes it, and an
  -- unused grant just expires.
  return ok(eid)
end))

-- The exec_core fields ff_promote_delayed reads.
sched.PROMOTE_FIELDS = {'lifecycle_phase', 'eligibility_state', 'delay_until', 'priority', 'created_at'}

-- ff_promote_delayed
-- KEYS: exec_core, lane_delayed, lane_eligible
-- ARGV: execution_id, now_ms
redis.register_function('ff_promote_delayed', with_keys(3, function(keys, args)
  local now, bad = num_arg(args[2], 'now_ms')
  if not now then return bad end
  local eid = args[1] or ''

  local core = hash_fields_or_nil(keys[1], sched.PROMOTE_FIELDS)
  if not core then
    redis.call('ZREM', keys[2], eid)
    return ok('not_found_cleaned')
  end
  if core.lifecycle_phase ~= 'runnable' then
    redis.call('ZREM', keys[2], eid)
    return ok('not_runnable_cleaned')
  end
  if core.eligibility_state ~= 'not_eligible_until_time' then
    redis.call('ZREM', keys[2], eid)
    return ok('not_delayed_cleaned')
  end
  if (tonumber(core.delay_until) or 0) > now then
    return ok('not_yet_due')
  end

  -- attempt_state is left as is: it tells the next claim whether this is
  -- a first, retry, replay or resumed attempt.
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'runnable',
    'ownership_state', 'unowned',
    'eligibility_state', 'eligible_now',
    'blocking_reason', 'waiting_for_worker',
    'blocking_detail', '',
    'terminal_outcome', 'none',
    'public_state', 'waiting',
    'delay_until', '',
    'last_transition_at', tostring(now),
    'last_mutation_at', tostring(now))
  redis.call('ZREM', keys[2], eid)
  redis.call('ZADD', keys[3], eligible_score(core.priority, core.created_at), eid)
  return ok('promoted')
end))

-- ff_change_priority
-- KEYS: exec_core, lane_eligible
-- ARGV: execution_id, new_priority
redis.register_function('ff_change_priority', with_keys(2, function(keys, args)
  local prio, bad = num_arg(args[2], 'new_priority')
  if not prio then return bad end
  local eid = args[1] or ''
  local now = now_ms()

  local core = sched.core(keys[1])
  if not core then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' or core.eligibility_state ~= 'eligible_now' then
    return err('execution_not_eligible')
  end
  local old = tonumber(core.priority) or 0
  -- Clamped like create, but not rounded (FlowFabric stores the number
  -- as given).
  if prio < 0 then prio = 0 end
  if prio > 9000 then prio = 9000 end
  redis.call('HSET', keys[1],
    'priority', tostring(prio),
    'last_mutation_at', tostring(now))
  redis.call('ZADD', keys[2], eligible_score(prio, core.created_at), eid)
  return ok(tostring(old), tostring(prio))
end))

-- ff_register_worker
-- KEYS: worker alive, worker caps, namespace workers index (no hash tag)
-- ARGV: instance_id, worker_id, lanes_csv, caps_csv, ttl_ms, now_ms
redis.register_function('ff_register_worker', with_keys(3, function(keys, args)
  local ttl, bad = num_arg(args[5], 'ttl_ms')
  if not ttl then return bad end
  local now, bad2 = num_arg(args[6], 'now_ms')
  if not now then return bad2 end

  local existed = redis.call('EXISTS', keys[1])
  redis.call('SET', keys[1], '1', 'PX', tostring(ttl))
  redis.call('HSET', keys[2],
    'worker_id', args[2] or '',
    'lanes_csv', args[3] or '',
    'caps_csv', args[4] or '',
    'ttl_ms', tostring(ttl),
    'registered_at_ms', tostring(now),
    'last_heartbeat_ms', tostring(now))
  redis.call('PEXPIRE', keys[2], tostring(ttl))
  redis.call('SADD', keys[3], args[1] or '')
  if existed == 0 then
    return ok('registered')
  end
  return ok('refreshed')
end))

-- ff_heartbeat_worker
-- KEYS: worker alive, worker caps
-- ARGV: now_ms
redis.register_function('ff_heartbeat_worker', with_keys(2, function(keys, args)
  local now, bad = num_arg(args[1], 'now_ms')
  if not now then return bad end

  local raw = redis.call('HGET', keys[2], 'ttl_ms')
  local ttl = raw and tonumber(raw)
  if not ttl then
    return ok('not_registered')
  end
  if redis.call('PEXPIRE', keys[1], tostring(ttl)) == 0 then
    return ok('not_registered')
  end
  redis.call('PEXPIRE', keys[2], tostring(ttl))
  redis.call('HSET', keys[2], 'last_heartbeat_ms', tostring(now))
  return ok('refreshed', tostring(ttl))
end))

-- ff_update_progress
-- KEYS: exec_core
-- ARGV: execution_id, lease_id, lease_epoch, progress_pct, progress_message
redis.register_function('ff_update_progress', with_keys(1, function(keys, args)
  local now = now_ms()
  local core = sched.core(keys[1])
  if not core then return err('execution_not_found') end

  -- Lite lease check: no attempt id, and an expired lease is reported but
  -- not marked.
  if core.lifecycle_phase ~= 'active' then
    return err_not_active(core)
  end
  if core.ownership_state == 'lease_revoked' then
    return err('lease_revoked')
  end
  if (tonumber(core.lease_expires_at) or 0) <= now then
    return err('lease_expired')
  end
  if core.current_lease_id ~= args[2] or core.current_lease_epoch ~= args[3] then
    return err('stale_lease')
  end

  local w = {'last_mutation_at', tostring(now), 'progress_updated_at', tostring(now)}
  if is_set(args[4]) then
    w[#w + 1] = 'progress_pct'
    w[#w + 1] = args[4]
  end
  if is_set(args[5]) then
    w[#w + 1] = 'progress_message'
    w[#w + 1] = args[5]
  end
  redis.call('HSET', keys[1], unpack(w))
  return ok()
end))

-- ff_issue_reclaim_grant
-- KEYS: exec_core, claim_grant, lease_expiry
-- ARGV: as ff_issue_claim_grant
redis.register_function('ff_issue_reclaim_grant', with_keys(2, function(keys, args)
  local ttl, bad = num_arg(args[6], 'grant_ttl_ms')
  if not ttl then return bad end
  local eid = args[1] or ''
  local now = now_ms()

  local core = sched.core(keys[1])
  if not core then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'active' then
    return err('execution_not_reclaimable')
  end
  if core.ownership_state ~= 'lease_expired_reclaimable'
    and core.ownership_state ~= 'lease_revoked' then
    return err('execution_not_reclaimable')
  end
  if redis.call('EXISTS', keys[2]) == 1 then
    return err('grant_already_exists')
  end
  local gate = sched.caps_gate(keys[1], core, args[9], now)
  if gate then return gate end

  local expires = now + ttl
  sched.write_grant(keys[2], args[2] or '', args[3] or '', args[4] or '',
    args[5] or '', args[7] or '', args[8] or '', now, expires)
  redis.call('PEXPIREAT', keys[2], sched.int(expires))
  -- lease_expiry is left alone: reclaim removes the execution from it.
  return ok(eid, tostring(expires))
end))

-- The exec_core fields ff_issue_grant_and_claim reads.
sched.GRANT_AND_CLAIM_FIELDS = {
  'lifecycle_phase', 'ownership_state', 'eligibility_state', 'terminal_outcome',
  'attempt_state', 'current_lease_epoch', 'current_attempt_index', 'current_attempt_id',
  'total_attempt_count', 'started_at', 'pending_retry_reason', 'pending_previous_attempt_index',
  'pending_replay_reason', 'pending_replay_requested_by',
}

-- ff_issue_grant_and_claim
-- KEYS: exec_core, claim_grant, lane_eligible, lease_expiry, worker_leases,
--       attempts, lease_current, lease_history, lane_active,
--       attempt_timeout, execution_deadline
-- ARGV: execution_id, worker_id, worker_instance_id, lane,
--       capability_hash, lease_id, lease_ttl_ms, attempt_id,
--       attempt_policy_json, attempt_timeout_ms, execution_deadline_at
redis.register_function('ff_issue_grant_and_claim', with_keys(11, function(keys, args)
  local ttl, bad = num_arg(args[7], 'lease_ttl_ms')
  if not ttl then return bad end
  local K = {
    core = keys[1], grant = keys[2], eligible = keys[3], lease_expiry = keys[4],
    worker_leases = keys[5], attempts = keys[6], lease_current = keys[7],
    history = keys[8], active = keys[9], attempt_timeout = keys[10],
    deadline = keys[11],
  }
  local eid = args[1] or ''
  local worker_id = args[2] or ''
  local wiid = args[3] or ''
  local lane = args[4] or ''
  local lease_id = args[6] or ''
  local attempt_id = args[8] or ''
  local policy_json = args[9] or ''
  local timeout_ms = args[10] or ''
  local deadline_at = args[11] or ''
  -- Optional numbers ('' or '0' = none) are checked before any write.
  if is_set(timeout_ms) and timeout_ms ~= '0' then
    local _, e = num_arg(timeout_ms, 'attempt_timeout_ms')
    if e then return e end
  end
  if is_set(deadline_at) and deadline_at ~= '0' then
    local _, e = num_arg(deadline_at, 'execution_deadline_at')
    if e then return e end
  end
  local now = now_ms()

  local core = hash_fields_or_nil(K.core, sched.GRANT_AND_CLAIM_FIELDS)
  if not core then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' then
    return err('execution_not_eligible')
  end
  if core.ownership_state ~= 'unowned' then
    return err('lease_conflict')
  end
  if core.terminal_outcome ~= 'none' then
    return err('execution_not_eligible')
  end
  if core.attempt_state == 'running_attempt' then
    return err('active_attempt_exists')
  end
  if redis.call('EXISTS', K.grant) == 1 then
    return err('grant_already_exists')
  end

  -- The grant is written and consumed in this one call; the TTL only
  -- bounds a leak if the call dies half way.
  local grant_expires = now + ttl
  sched.write_grant(K.grant, worker_id, wiid, lane, args[5] or '', '', '', now, grant_expires)
  redis.call('PEXPIRE', K.grant, sched.int(ttl))

  local tag = keyfmt.tag(K.core)
  local epoch = (tonumber(core.current_lease_epoch) or 0) + 1
  local epoch_s = tostring(epoch)
  local expires = now + ttl
  local renew_by = now + math.floor(ttl * 2 / 3)
  local now_s = tostring(now)

  if core.attempt_state == 'attempt_interrupted' then
    -- Resume the interrupted attempt.
    local idx = core.current_attempt_index or ''
    local aid = core.current_attempt_id or ''
    redis.call('DEL', K.grant)
    redis.call('HSET', keyfmt.attempt(tag, eid, idx),
      'attempt_state', 'started',
      'resumed_at', now_s,
      'lease_id', lease_id,
      'lease_epoch', epoch_s,
      'worker_id', worker_id,
      'worker_instance_id', wiid,
      'suspended_at', '',
      'suspension_id', '')
    write_lease_current(K.lease_current, {
      lease_id = lease_id, lease_epoch = epoch_s, execution_id = eid,
      attempt_id = aid, worker_id = worker_id, worker_instance_id = wiid,
      acquired_at = now_s, expires_at = tostring(expires), renewal_deadline = tostring(renew_by),
    })
    hset_pairs(K.core, CLAIMED_VECTOR, {
      'current_lease_id', lease_id,
      'current_lease_epoch', epoch_s,
      'current_worker_id', worker_id,
      'current_worker_instance_id', wiid,
      'current_lane', lane,
      'lease_acquired_at', now_s,
      'lease_expires_at', tostring(expires),
      'lease_last_renewed_at', now_s,
      'lease_renewal_deadline', tostring(renew_by),
      'lease_expired_at', '',
      'lease_revoked_at', '',
      'lease_revoke_reason', '',
      'last_transition_at', now_s,
      'last_mutation_at', now_s,
    })
    redis.call('ZREM', K.eligible, eid)
    redis.call('ZADD', K.lease_expiry, expires, eid)
    redis.call('SADD', K.worker_leases, eid)
    redis.call('ZADD', K.active, expires, eid)
    history_add(K.history,
      'event', 'acquired',
      'lease_id', lease_id,
      'lease_epoch', epoch_s,
      'attempt_index', idx,
      'attempt_id', aid,
      'worker_id', worker_id,
      'reason', 'issue_grant_and_claim_resumed',
      'ts', now_s)
    return ok(lease_id, epoch_s, tostring(idx))
  end

  -- Fresh attempt.
  if not redis.call('ZSCORE', K.eligible, eid) then
    redis.call('DEL', K.grant)
    return err('execution_not_in_eligible_set')
  end
  if core.eligibility_state ~= 'eligible_now' then
    redis.call('DEL', K.grant)
    return err('execution_not_eligible')
  end

  local policy_pairs = nil
  if is_set(policy_json) then
    policy_pairs = sched.flatten_policy(policy_json)
    if not policy_pairs then
      redis.call('DEL', K.grant)
      return err('invalid_policy_json', 'malformed')
    end
  end

  local idx = tonumber(core.total_attempt_count) or 0
  local idx_s = tostring(idx)
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

  redis.call('DEL', K.grant)
  local att_key = keyfmt.attempt(tag, eid, idx_s)
  redis.call('HSET', att_key,
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
  redis.call('ZADD', K.attempts, now_s, idx_s)
  redis.call('HSET', att_key .. ':usage', 'last_usage_report_seq', '0')
  if policy_pairs then
    call_chunked('HSET', att_key .. ':policy', policy_pairs)
  end

  write_lease_current(K.lease_current, {
    lease_id = lease_id, lease_epoch = epoch_s, execution_id = eid,
    attempt_id = attempt_id, worker_id = worker_id, worker_instance_id = wiid,
    acquired_at = now_s, expires_at = tostring(expires), renewal_deadline = tostring(renew_by),
  })

  local started = core.started_at
  if not is_set(started) then started = now_s end
  -- CLAIMED_VECTOR, then the lease and attempt fields, in one HSET.
  redis.call('HSET', K.core,
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
    'current_lane', lane,
    'lease_acquired_at', now_s,
    'lease_expires_at', tostring(expires),
    'lease_last_renewed_at', now_s,
    'lease_renewal_deadline', tostring(renew_by),
    'started_at', started,
    'pending_retry_reason', '',
    'pending_replay_reason', '',
    'pending_replay_requested_by', '',
    'pending_previous_attempt_index', '',
    'last_transition_at', now_s,
    'last_mutation_at', now_s)

  redis.call('ZREM', K.eligible, eid)
  redis.call('ZADD', K.lease_expiry, expires, eid)
  redis.call('SADD', K.worker_leases, eid)
  redis.call('ZADD', K.active, expires, eid)
  if is_set(timeout_ms) and timeout_ms ~= '0' then
    redis.call('ZADD', K.attempt_timeout, now + tonumber(timeout_ms), eid)
  end
  if is_set(deadline_at) and deadline_at ~= '0' then
    redis.call('ZADD', K.deadline, tonumber(deadline_at), eid)
  end
  history_add(K.history,
    'event', 'acquired',
    'lease_id', lease_id,
    'lease_epoch', epoch_s,
    'attempt_id', attempt_id,
    'attempt_index', idx_s,
    'worker_id', worker_id,
    'reason', 'issue_grant_and_claim',
    'ts', now_s)
  return ok(lease_id, epoch_s, idx_s)
end))
