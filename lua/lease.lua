-- Lease family: renewal, the expiry scanner's re-check, operator
-- revocation.

-- The exec_core fields ff_renew_lease reads: LEASE_FIELDS and
-- lease_revoked_at. (Library load time has no ipairs to build it.)
local lease_renew_fields = {
  'lifecycle_phase', 'ownership_state', 'eligibility_state', 'terminal_outcome',
  'current_lease_id', 'current_lease_epoch', 'current_attempt_id', 'current_attempt_index',
  'current_worker_id', 'current_worker_instance_id', 'lease_expires_at', 'flow_id',
  'lease_revoked_at',
}

-- ff_renew_lease
-- KEYS: exec_core, lease_current, lease_history, lease_expiry
-- ARGV: execution_id, attempt_index, attempt_id, lease_id, lease_epoch,
--       lease_ttl_ms, lease_history_grace_ms
redis.register_function('ff_renew_lease', with_keys(4, function(keys, args)
  local ttl, bad = num_arg(args[6], 'lease_ttl_ms')
  if not ttl then return bad end
  local grace, bad2 = num_arg(args[7], 'lease_history_grace_ms')
  if not grace then return bad2 end
  local eid = args[1] or ''
  local now = now_ms()

  local core = hash_fields_or_nil(keys[1], lease_renew_fields)
  if not core then return err('execution_not_found') end

  -- Renewal is only for the holder: the full fence is mandatory.
  local fence, fence_err = resolve_fence(core, args[4], args[5], args[3])
  if not fence then return fence_err end
  if not fence_err then return err('fence_required') end

  if core.lifecycle_phase ~= 'active' then
    return err_not_active(core)
  end
  if core.ownership_state == 'lease_revoked' or is_set(core.lease_revoked_at) then
    return err('lease_revoked')
  end
  if (tonumber(core.lease_expires_at) or 0) <= now then
    mark_expired(keys[1], keys[3], core, now)
    return err('lease_expired')
  end
  if tostring(core.current_attempt_index) ~= args[2]
    or core.current_attempt_id ~= fence.attempt_id
    or core.current_lease_id ~= fence.lease_id
    or tostring(core.current_lease_epoch) ~= fence.lease_epoch then
    return err('stale_lease')
  end

  local expires = now + ttl
  local renew_by = now + math.floor(ttl * 2 / 3)
  redis.call('HSET', keys[1],
    'lease_last_renewed_at', tostring(now),
    'lease_renewal_deadline', tostring(renew_by),
    'lease_expires_at', tostring(expires),
    'last_mutation_at', tostring(now))
  redis.call('HSET', keys[2],
    'last_renewed_at', tostring(now),
    'renewal_deadline', tostring(renew_by),
    'expires_at', tostring(expires))
  redis.call('PEXPIREAT', keys[2], string.format('%d', math.floor(expires + grace)))
  redis.call('ZADD', keys[4], expires, eid)
  -- Renewals are deliberately not written to the lease history.
  return ok(tostring(expires))
end))

-- ff_mark_lease_expired_if_due
-- KEYS: exec_core, lease_current (unused), lease_expiry, lease_history
-- ARGV: execution_id
redis.register_function('ff_mark_lease_expired_if_due', with_keys(4, function(keys, args)
  local eid = args[1] or ''
  local now = now_ms()

  -- LEASE_FIELDS holds what the checks and mark_expired read.
  local core = lease_core_or_nil(keys[1])
  if not core then
    redis.call('ZREM', keys[3], eid)
    return ok_status('ALREADY_SATISFIED', 'execution_not_found')
  end
  if core.lifecycle_phase ~= 'active' then
    redis.call('ZREM', keys[3], eid)
    return ok_status('ALREADY_SATISFIED', 'not_active')
  end
  if core.ownership_state == 'lease_expired_reclaimable' then
    return ok_status('ALREADY_SATISFIED', 'already_expired')
  end
  if core.ownership_state == 'lease_revoked' then
    return ok_status('ALREADY_SATISFIED', 'already_revoked')
  end
  if core.ownership_state == 'unowned' then
    redis.call('ZREM', keys[3], eid)
    return ok_status('ALREADY_SATISFIED', 'unowned')
  end
  if (tonumber(core.lease_expires_at) or 0) > now then
    return ok_status('ALREADY_SATISFIED', 'not_yet_expired')
  end
  -- The eid stays in lease_expiry: reclaim, cancel or expiry remove it.
  mark_expired(keys[1], keys[4], core, now)
  return ok('marked_expired')
end))

-- ff_revoke_lease
-- KEYS: exec_core, lease_current, lease_history, lease_expiry,
--       worker_leases(holder)
-- ARGV: execution_id, expected_lease_id ('' = any), revoke_reason
redis.register_function('ff_revoke_lease', with_keys(5, function(keys, args)
  local eid = args[1] or ''
  local expected = args[2]
  local reason = args[3] or 'operator'
  local now = now_ms()

  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'active' then
    return err_not_active(core)
  end
  if core.ownership_state ~= 'leased' then
    if core.ownership_state == 'lease_revoked' then
      return ok_status('ALREADY_SATISFIED', 'already_revoked')
    end
    if core.ownership_state == 'lease_expired_reclaimable' then
      return ok_status('ALREADY_SATISFIED', 'already_expired')
    end
    return err('no_active_lease')
  end
  if is_set(expected) and core.current_lease_id ~= expected then
    return err('stale_lease',
      'expected ' .. expected .. ' but current is ' .. (core.current_lease_id or ''))
  end

  local lease_id = core.current_lease_id or ''
  local epoch = core.current_lease_epoch or ''
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'active',
    'ownership_state', 'lease_revoked',
    'eligibility_state', core.eligibility_state or 'not_applicable',
    'blocking_reason', 'waiting_for_worker',
    'blocking_detail', 'lease revoked: ' .. reason,
    'terminal_outcome', 'none',
    'attempt_state', 'attempt_interrupted',
    'public_state', 'active',
    'lease_revoked_at', tostring(now),
    'lease_revoke_reason', reason,
    'last_mutation_at', tostring(now))
  redis.call('DEL', keys[2])
  redis.call('ZREM', keys[4], eid)
  redis.call('SREM', keys[5], eid)
  history_add(keys[3],
    'event', 'revoked',
    'lease_id', lease_id,
    'lease_epoch', epoch,
    'attempt_index', core.current_attempt_index or '',
    'attempt_id', core.current_attempt_id or '',
    'worker_id', core.current_worker_id or '',
    'worker_instance_id', core.current_worker_instance_id or '',
    'reason', reason,
    'ts', tostring(now))
  return ok('revoked', lease_id, epoch)
end))
