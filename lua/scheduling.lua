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

-- ff_issue_claim_grant
-- KEYS: exec_core, claim_grant, lane_eligible
-- ARGV: execution_id, worker_id, worker_instance_id, lane_id,
--       capability_hash, grant_ttl_ms, route_snapshot_json,
--       admission_summary, worker_capabilities_csv
redis.register_function('ff_issue_claim_grant', function(keys, args)
  local ttl, bad = num_arg(args[6], 'grant_ttl_ms')
  if not ttl then return bad end
  local eid = args[1] or ''
  local now = now_ms()

  local core = sched.core(keys[1])
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
end)

-- ff_promote_delayed
-- KEYS: exec_core, lane_delayed, lane_eligible
-- ARGV: execution_id, now_ms
redis.register_function('ff_promote_delayed', function(keys, args)
  local now, bad = num_arg(args[2], 'now_ms')
  if not now then return bad end
  local eid = args[1] or ''

  local core = sched.core(keys[1])
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
end)
