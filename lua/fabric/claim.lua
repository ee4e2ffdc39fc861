-- fabric_claim_execution: ff_issue_claim_grant followed by
-- ff_claim_execution, in one call (one round trip, one script run).
--
-- The keyspace after it equals the keyspace after the two flowfabric calls
-- with the same inputs: the same keys, fields, scores and stream entries
-- (timestamps aside: both run on one server clock reading here). Neither
-- call publishes. The grant is written only where the two calls would
-- leave it behind (the claim refused after the grant was issued); on
-- success it is never written, as the claim would have deleted it.
-- backend/valkey TestFabricClaimMatchesGrantThenClaim compares the two.
--
-- KEYS (16): 1-14 as ff_claim_execution (exec_core, claim_grant,
--   lane_eligible, lease_expiry, worker_leases, attempt hash/usage/policy
--   placeholders, attempts, lease_current, lease_history, lane_active,
--   attempt_timeout, execution_deadline; KEYS[1..3] are the grant's KEYS),
--   15 exec policy, 16 exec payload (both only read).
-- ARGV (17): 1-12 as ff_claim_execution (execution_id, worker_id,
--   worker_instance_id, lane, capability_hash, lease_id, lease_ttl_ms,
--   renew_before_ms, attempt_id, attempt_policy_json, attempt_timeout_ms,
--   execution_deadline_at); then the grant's own: 13 grant_ttl_ms,
--   14 route_snapshot_json, 15 admission_summary,
--   16 worker_capabilities_csv; 17 timeout_from_policy: "1" with an empty
--   ARGV[11] takes attempt_timeout_ms from the stored policy's
--   timeout_policy.attempt_timeout_ms (an integer other than 0), as a
--   caller reading KEYS[15] first would send it.
-- Reply: success is ff_claim_execution's reply followed by what a worker
--   reads to run the execution:
--   {1, 'OK', lease_id, epoch, expires_at, attempt_id, attempt_index,
--    attempt_type, execution_kind, namespace, flow_id, lane_id, payload}.
--   A refusal is the reply of the call that refused: the grant's
--   (invalid_input grant_ttl_ms, execution_not_found,
--   execution_not_eligible, grant_already_exists,
--   execution_not_in_eligible_set, invalid_capabilities,
--   capability_mismatch — which stamps last_capability_mismatch_at) with
--   nothing else written, or the claim's (invalid_input,
--   execution_not_leaseable, lease_conflict, active_attempt_exists,
--   use_claim_resumed_execution, invalid_policy_json, invalid_claim_grant)
--   with the grant issued and left in place, as after the two calls.

local claim = {}

claim.CORE_FIELDS = {
  'lifecycle_phase', 'eligibility_state', 'required_capabilities',
  'ownership_state', 'terminal_outcome', 'attempt_state',
  'current_lease_epoch', 'total_attempt_count', 'pending_retry_reason',
  'pending_previous_attempt_index', 'pending_replay_reason',
  'pending_replay_requested_by', 'started_at', 'execution_kind',
  'namespace', 'flow_id', 'lane_id',
}

function claim.set(v)
  return v ~= nil and v ~= false and v ~= ''
end

function claim.num(v, name)
  local n = tonumber(v)
  if n == nil then
    return nil, fab.err('invalid_input', name .. ' must be a number, got: ' .. tostring(v))
  end
  return n
end

-- As ff_claim_execution's optional numbers: '' and '0' mean none (false).
function claim.opt_num(v, name)
  if not claim.set(v) or v == '0' then return false end
  return claim.num(v, name)
end

-- As the scheduler's capability parse: every non-empty token counts
-- toward the cap, duplicates included.
function claim.caps_set(csv, kind)
  local set = {}
  if not claim.set(csv) then return set end
  if #csv > 4096 then
    return nil, fab.err('invalid_capabilities', kind .. ':too_many_bytes')
  end
  local count = 0
  for tok in string.gmatch(csv, '[^,]+') do
    count = count + 1
    if count > 256 then
      return nil, fab.err('invalid_capabilities', kind .. ':too_many_tokens')
    end
    set[tok] = true
  end
  return set
end

function claim.flatten_policy(json)
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

-- timeout_policy.attempt_timeout_ms of a stored policy document (false
-- or nil when there is none), or false.
function claim.policy_timeout(doc)
  if not doc or not string.find(doc, 'attempt_timeout_ms', 1, true) then return false end
  local okd, p = pcall(cjson.decode, doc)
  if not okd or type(p) ~= 'table' or type(p.timeout_policy) ~= 'table' then return false end
  local v = p.timeout_policy.attempt_timeout_ms
  if type(v) ~= 'number' or v ~= math.floor(v) or v == 0 then return false end
  return v
end

-- The grant as ff_issue_claim_grant writes it, for a claim that refuses
-- after the grant was issued (nothing when the grant would already have
-- expired: PEXPIREAT at or before now deletes it at once). Returns reply.
function claim.leave_grant(keys, args, now, gexpires, reply)
  if math.floor(gexpires) > now then
    redis.call('HSET', keys[2],
      'worker_id', args[2] or '',
      'worker_instance_id', args[3] or '',
      'lane_id', args[4] or '',
      'capability_hash', args[5] or '',
      'route_snapshot_json', args[14] or '',
      'admission_summary', args[15] or '',
      'created_at', tostring(now),
      'grant_expires_at', tostring(gexpires))
    redis.call('PEXPIREAT', keys[2], string.format('%d', math.floor(gexpires)))
  end
  return reply
end

-- claim.run is fabric_claim_execution's body for its KEYS and ARGV, at
-- server time now (ms). in_eligible is true when the caller read eid from
-- KEYS[3] in this same script (the membership check is then known true).
-- The core's fields stay in HMGET's array (f[i] is CORE_FIELDS[i]): no
-- table keyed by name is built per call.
function claim.run(keys, args, now, in_eligible)
  local eid = args[1] or ''
  local worker_id = args[2] or ''
  local wiid = args[3] or ''

  -- ff_issue_claim_grant.
  local gttl, gbad = claim.num(args[13], 'grant_ttl_ms')
  if not gttl then return gbad end
  local f = redis.call('HMGET', keys[1], unpack(claim.CORE_FIELDS))
  -- f: 1 lifecycle_phase, 2 eligibility_state, 3 required_capabilities,
  -- 4 ownership_state, 5 terminal_outcome, 6 attempt_state,
  -- 7 current_lease_epoch, 8 total_attempt_count, 9 pending_retry_reason,
  -- 10 pending_previous_attempt_index, 11 pending_replay_reason,
  -- 12 pending_replay_requested_by, 13 started_at, 14 execution_kind,
  -- 15 namespace, 16 flow_id, 17 lane_id (false when missing).
  if not f[1] and redis.call('EXISTS', keys[1]) == 0 then
    return fab.err('execution_not_found')
  end
  if f[1] ~= 'runnable' or f[2] ~= 'eligible_now' then
    return fab.err('execution_not_eligible')
  end
  -- One EXISTS over the grant and lease_current: when neither exists (a
  -- fresh claim) the grant check passes and the DEL of lease_current
  -- below would be a no-op, so it is skipped; otherwise the grant is
  -- asked alone and lease_current deleted as before.
  local grant_or_lease = redis.call('EXISTS', keys[2], keys[10])
  if grant_or_lease > 0 and redis.call('EXISTS', keys[2]) == 1 then
    return fab.err('grant_already_exists')
  end
  if not in_eligible and not redis.call('ZSCORE', keys[3], eid) then
    return fab.err('execution_not_in_eligible_set')
  end
  -- Capabilities: both lists are parsed only when set (an empty one is
  -- the empty set, and nothing is missing from an empty requirement).
  local required_csv, worker_csv = f[3], args[16]
  if claim.set(required_csv) or claim.set(worker_csv) then
    local required, e1 = claim.caps_set(required_csv, 'required')
    if not required then return e1 end
    local have, e2 = claim.caps_set(worker_csv, 'worker')
    if not have then return e2 end
    local missing = {}
    for cap in pairs(required) do
      if not have[cap] then missing[#missing + 1] = cap end
    end
    if #missing > 0 then
      table.sort(missing)
      redis.call('HSET', keys[1], 'last_capability_mismatch_at', tostring(now))
      return fab.err('capability_mismatch', table.concat(missing, ','))
    end
  end
  local gexpires = now + gttl

  -- ff_claim_execution.
  local ttl, b1 = claim.num(args[7], 'lease_ttl_ms')
  if not ttl then return claim.leave_grant(keys, args, now, gexpires, b1) end
  local renew_before, b2 = claim.num(args[8], 'renew_before_ms')
  if not renew_before then return claim.leave_grant(keys, args, now, gexpires, b2) end
  local timeout_arg = args[11]
  -- The payload (read for the reply) comes with the policy in one MGET
  -- when the policy is read; neither key is written here.
  local payload
  if args[17] == '1' and not claim.set(timeout_arg) then
    local docs = redis.call('MGET', keys[15], keys[16])
    payload = docs[2] or ''
    timeout_arg = claim.policy_timeout(docs[1])
    if timeout_arg then timeout_arg = string.format('%d', timeout_arg) end
  end
  local attempt_timeout, b3 = claim.opt_num(timeout_arg, 'attempt_timeout_ms')
  if attempt_timeout == nil then return claim.leave_grant(keys, args, now, gexpires, b3) end
  local deadline, b4 = claim.opt_num(args[12], 'execution_deadline_at')
  if deadline == nil then return claim.leave_grant(keys, args, now, gexpires, b4) end
  local attempt_state = f[6]
  if f[4] ~= 'unowned' then
    return claim.leave_grant(keys, args, now, gexpires, fab.err('lease_conflict'))
  end
  if f[5] ~= 'none' then
    return claim.leave_grant(keys, args, now, gexpires, fab.err('execution_not_leaseable'))
  end
  if attempt_state == 'running_attempt' then
    return claim.leave_grant(keys, args, now, gexpires, fab.err('active_attempt_exists'))
  end
  if attempt_state == 'attempt_interrupted' then
    return claim.leave_grant(keys, args, now, gexpires, fab.err('use_claim_resumed_execution'))
  end
  local policy_json = args[10] or ''
  local policy_flat
  -- '{}' flattens to nothing: no decode for the SDK's default policy.
  if policy_json ~= '' and policy_json ~= '{}' then
    policy_flat = claim.flatten_policy(policy_json)
    if not policy_flat then
      return claim.leave_grant(keys, args, now, gexpires, fab.err('invalid_policy_json', 'malformed'))
    end
  end
  if math.floor(gexpires) <= now then return fab.err('invalid_claim_grant') end

  local lease_id = args[6] or ''
  local attempt_id = args[9] or ''
  local epoch = (tonumber(f[7]) or 0) + 1
  local idx = tonumber(f[8]) or 0
  local expires = now + ttl
  local now_s, epoch_s, idx_s = fab.num_str(now), fab.num_str(epoch), fab.num_str(idx)
  local expires_s, renew_s = fab.num_str(expires), fab.num_str(now + renew_before)

  local tag = string.match(keys[1], '(%b{})')
  local att_key = 'ff:attempt:' .. tag .. ':' .. eid .. ':' .. idx_s
  local attempt_type = 'initial'
  if attempt_state == 'pending_retry_attempt' then
    attempt_type = 'retry'
    redis.call('HSET', att_key,
      'attempt_id', attempt_id, 'execution_id', eid, 'attempt_index', idx_s,
      'attempt_type', 'retry', 'attempt_state', 'started', 'created_at', now_s,
      'started_at', now_s, 'lease_id', lease_id, 'lease_epoch', epoch_s,
      'worker_id', worker_id, 'worker_instance_id', wiid,
      'retry_reason', f[9] or '',
      'previous_attempt_index', f[10] or '')
  elseif attempt_state == 'pending_replay_attempt' then
    attempt_type = 'replay'
    redis.call('HSET', att_key,
      'attempt_id', attempt_id, 'execution_id', eid, 'attempt_index', idx_s,
      'attempt_type', 'replay', 'attempt_state', 'started', 'created_at', now_s,
      'started_at', now_s, 'lease_id', lease_id, 'lease_epoch', epoch_s,
      'worker_id', worker_id, 'worker_instance_id', wiid,
      'replay_reason', f[11] or '',
      'replay_requested_by', f[12] or '',
      'replayed_from_attempt_index', f[10] or '')
  else
    redis.call('HSET', att_key,
      'attempt_id', attempt_id, 'execution_id', eid, 'attempt_index', idx_s,
      'attempt_type', 'initial', 'attempt_state', 'started', 'created_at', now_s,
      'started_at', now_s, 'lease_id', lease_id, 'lease_epoch', epoch_s,
      'worker_id', worker_id, 'worker_instance_id', wiid)
  end
  redis.call('ZADD', keys[9], now_s, idx_s)
  redis.call('HSET', att_key .. ':usage', 'last_usage_report_seq', '0')
  if policy_flat and #policy_flat > 0 then
    redis.call('HSET', att_key .. ':policy', unpack(policy_flat))
  end

  if grant_or_lease > 0 then redis.call('DEL', keys[10]) end
  redis.call('HSET', keys[10],
    'lease_id', lease_id,
    'lease_epoch', epoch_s,
    'execution_id', eid,
    'attempt_id', attempt_id,
    'worker_id', worker_id,
    'worker_instance_id', wiid,
    'acquired_at', now_s,
    'expires_at', expires_s,
    'last_renewed_at', now_s,
    'renewal_deadline', renew_s)

  -- The core: every field ff_claim_execution writes, except those read
  -- above whose stored value is already the one written (terminal_outcome
  -- is 'none' here; started_at and the pending_* fields when unchanged).
  -- The first claim of a fresh execution (started_at unset, no pending_*
  -- value) is one literal HSET; any other builds the pairs in a table.
  local started_set = claim.set(f[13])
  if not started_set and f[9] == '' and f[11] == '' and f[12] == '' and f[10] == '' then
    redis.call('HSET', keys[1],
      'lifecycle_phase', 'active',
      'ownership_state', 'leased',
      'eligibility_state', 'not_applicable',
      'blocking_reason', 'none',
      'blocking_detail', '',
      'attempt_state', 'running_attempt',
      'public_state', 'active',
      'current_attempt_index', idx_s,
      'total_attempt_count', fab.num_str(idx + 1),
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
      'last_transition_at', now_s,
      'last_mutation_at', now_s,
      'started_at', now_s)
  else
    local core = {
      'lifecycle_phase', 'active',
      'ownership_state', 'leased',
      'eligibility_state', 'not_applicable',
      'blocking_reason', 'none',
      'blocking_detail', '',
      'attempt_state', 'running_attempt',
      'public_state', 'active',
      'current_attempt_index', idx_s,
      'total_attempt_count', fab.num_str(idx + 1),
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
      'last_transition_at', now_s,
      'last_mutation_at', now_s,
    }
    if not started_set then
      core[#core + 1] = 'started_at'
      core[#core + 1] = now_s
    end
    -- PENDING_FIELDS order: retry_reason, replay_reason,
    -- replay_requested_by, previous_attempt_index.
    if f[9] ~= '' then core[#core + 1] = 'pending_retry_reason'; core[#core + 1] = '' end
    if f[11] ~= '' then core[#core + 1] = 'pending_replay_reason'; core[#core + 1] = '' end
    if f[12] ~= '' then core[#core + 1] = 'pending_replay_requested_by'; core[#core + 1] = '' end
    if f[10] ~= '' then core[#core + 1] = 'pending_previous_attempt_index'; core[#core + 1] = '' end
    redis.call('HSET', keys[1], unpack(core))
  end

  redis.call('ZREM', keys[3], eid)
  local expires_z = fab.score_arg(expires)
  redis.call('ZADD', keys[4], expires_z, eid)
  redis.call('SADD', keys[5], eid)
  redis.call('ZADD', keys[12], expires_z, eid)
  if attempt_timeout then
    redis.call('ZADD', keys[13], fab.score_arg(now + attempt_timeout), eid)
  end
  if deadline then
    redis.call('ZADD', keys[14], deadline, eid)
  end
  redis.call('XADD', keys[11], 'MAXLEN', '~', '1000', '*',
    'event', 'acquired',
    'lease_id', lease_id,
    'lease_epoch', epoch_s,
    'attempt_id', attempt_id,
    'attempt_index', idx_s,
    'worker_id', worker_id,
    'ts', now_s)

  if payload == nil then payload = redis.call('GET', keys[16]) or '' end
  return fab.ok(lease_id, epoch_s, expires_s, attempt_id, idx_s, attempt_type,
    f[14] or '', f[15] or '', f[16] or '', f[17] or '', payload)
end

redis.register_function('fabric_claim_execution', function(keys, args)
  if #keys < 16 then
    return fab.err('invalid_input', 'KEYS: want at least 16, got ' .. #keys)
  end
  return claim.run(keys, args, fab.now_ms())
end)

-- fabric_claim_next claims the next eligible executions of one lane on one
-- partition: it reads up to H heads of the lane's eligible zset (in score
-- order) and runs fabric_claim_execution on each, until C are claimed.
-- Each head's effects are exactly fabric_claim_execution's for that id
-- (the attempt policy '{}', no execution deadline, empty route snapshot
-- and admission summary, the attempt timeout from the stored policy), all
-- at one server clock reading. Workers of a lane calling it never race
-- for one head: the head is picked inside the call.
-- backend/valkey TestFabricClaimNextMatchesClaimByID compares the two.
--
-- KEYS (6): 1 lane eligible zset, 2 lease_expiry, 3 worker_leases (of
--   ARGV[2]), 4 lane active, 5 attempt_timeout, 6 execution_deadline; the
--   per-execution keys are the heads' own (same hash tag as KEYS[1]).
-- ARGV (10 + 2C): 1 worker_id, 2 worker_instance_id, 3 lane,
--   4 capability_hash, 5 lease_ttl_ms, 6 renew_before_ms, 7 grant_ttl_ms,
--   8 worker_capabilities_csv, 9 C (claims wanted, >= 1), 10 H (heads
--   read, >= C), then C (lease_id, attempt_id) pairs: the n-th claim uses
--   the n-th pair.
-- Reply: {1, 'OK', k, then k records of 13 fields}, one record per head
--   tried in order: execution_id, then 'OK' and fabric_claim_execution's
--   eleven success fields, or the refusal's code and its details padded
--   with '' to eleven fields.
claim.NEXT_STRIDE = 11

redis.register_function('fabric_claim_next', function(keys, args)
  if #keys < 6 then
    return fab.err('invalid_input', 'KEYS: want 6, got ' .. #keys)
  end
  local want = tonumber(args[9] or '')
  local heads = tonumber(args[10] or '')
  if not want or want < 1 or want ~= math.floor(want) then
    return fab.err('invalid_input', 'claims must be a positive integer')
  end
  if not heads or heads < want or heads ~= math.floor(heads) then
    return fab.err('invalid_input', 'heads must be an integer >= claims')
  end
  if #args < 10 + 2 * want then
    return fab.err('invalid_input', 'ARGV: want ' .. (10 + 2 * want) .. ', got ' .. #args)
  end
  local tag = string.match(keys[1], '(%b{})')
  if not tag then return fab.err('invalid_input', 'KEYS[1] has no hash tag') end
  local ids = redis.call('ZRANGE', keys[1], 0, heads - 1)
  local out = {1, 'OK', '0'}
  if #ids == 0 then return out end
  local now = fab.now_ms()
  local ckeys = {'', '', keys[1], keys[2], keys[3], '', '', '', '', '', '', keys[4], keys[5], keys[6], '', ''}
  local cargs = {'', args[1], args[2], args[3], args[4], '', args[5], args[6], '', '{}', '', '',
    args[7], '', '', args[8], '1'}
  local got, tried = 0, 0
  for _, eid in ipairs(ids) do
    if got >= want then break end
    if fab.tag_of(eid) == tag then
      local x = 'ff:exec:' .. tag .. ':' .. eid .. ':'
      local a = 'ff:attempt:' .. tag .. ':' .. eid .. ':0'
      ckeys[1], ckeys[2] = x .. 'core', x .. 'claim_grant'
      ckeys[6], ckeys[7], ckeys[8] = a, a .. ':usage', a .. ':policy'
      ckeys[9], ckeys[10], ckeys[11] = x .. 'attempts', x .. 'lease:current', x .. 'lease:history'
      ckeys[15], ckeys[16] = x .. 'policy', x .. 'payload'
      cargs[1] = eid
      cargs[6], cargs[9] = args[11 + 2 * got], args[12 + 2 * got]
      local r = claim.run(ckeys, cargs, now, true)
      tried = tried + 1
      out[#out + 1] = eid
      local first = #out + 1
      if r[1] == 1 then
        got = got + 1
        for i = 2, #r do out[#out + 1] = r[i] end
      else
        for i = 2, math.min(#r, claim.NEXT_STRIDE + 1) do out[#out + 1] = r[i] end
      end
      for _ = #out - first + 1, claim.NEXT_STRIDE do out[#out + 1] = '' end
    end
  end
  out[3] = fab.num_str(tried)
  return out
end)
