-- Library-local helpers shared by every family file that follows. They are
-- `local` to the library chunk and therefore not callable with FCALL.
--
-- Keep the number of top-level locals small: Lua caps one chunk at 200
-- locals, and every family file is concatenated into this one chunk.

-- A string: redis.call formats a Lua number argument with %.17g per call.
local HISTORY_MAXLEN = '1000'
local CAPS_MAX_BYTES = 4096
local CAPS_MAX_TOKENS = 256
local PRIORITY_FACTOR = 1000000000000
local SUSPENDED_NO_TIMEOUT = 9999999999999

-- Server clock in milliseconds (TIME seconds*1000 + floor(micros/1000)).
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- tostring(n) for a number, cheaper: an integer of at most 14 digits
-- (every clock reading, count and epoch) is formatted with %d, which
-- prints what tostring's %.14g prints for it at a fraction of the cost;
-- anything else (a fraction, -0, a huge or non-finite value) goes to
-- tostring itself.
local function num_str(n)
  if n % 1 == 0 and n < 1e14 and n > -1e14 and (n ~= 0 or 1 / n > 0) then
    return string.format('%d', n)
  end
  return tostring(n)
end

-- n as a redis.call argument: the %d string for an integer of at most
-- 14 digits (what redis.call's own %.17g formatting of a number argument
-- gives), else n itself, formatted by redis.call.
local function num_arg_str(n)
  if n % 1 == 0 and n < 1e14 and n > -1e14 and (n ~= 0 or 1 / n > 0) then
    return string.format('%d', n)
  end
  return n
end

-- Reply shapes: {1, status, fields...} on success, {0, code, details...}
-- on a logical error. Errors are ordinary replies, never Lua errors.
local function ok(...)
  return {1, 'OK', ...}
end

local function ok_status(status, ...)
  return {1, status, ...}
end

local function err(code, ...)
  return {0, code, ...}
end

-- with_keys guards a function that reads or writes KEYS[1..n]: a call
-- with fewer KEYS is refused with invalid_input before anything is read
-- or written. FlowFabric raises a Lua runtime error there, some
-- functions after their first writes (a retried create then answered
-- DUPLICATE); see README.md, "Bad input". Functions with their own KEYS
-- count check (suspension, signal, stream, replay) keep it.
local function with_keys(n, fn)
  return function(keys, args)
    if #keys < n then
      return err('invalid_input', 'KEYS: want at least ' .. n .. ', got ' .. #keys)
    end
    return fn(keys, args)
  end
end

-- True unless v is nil, false (a missing HGET) or the empty string.
local function is_set(v)
  return v ~= nil and v ~= false and v ~= ''
end

-- Parses v as a number. Returns the number, or nil plus the invalid_input
-- reply the caller must return as is.
local function num_arg(v, name)
  local n = tonumber(v)
  if n == nil then
    return nil, err('invalid_input', name .. ' must be a number, got: ' .. tostring(v))
  end
  return n
end

-- HGETALL as a Lua table (empty table when the key is absent).
local function hash_table(key)
  local flat = redis.call('HGETALL', key)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t
end

-- HMGET of the listed fields as a Lua table shaped like hash_table's:
-- a missing field is absent (nil). An absent key and a hash holding none
-- of the fields both give an empty table; a caller that must tell them
-- apart checks EXISTS only then (hash_fields_or_nil).
local function hash_fields(key, fields)
  local vals = redis.call('HMGET', key, unpack(fields))
  local t = {}
  for i = 1, #fields do
    local v = vals[i]
    if v then t[fields[i]] = v end
  end
  return t
end

-- hash_fields, or nil when the key does not exist: what
-- `next(hash_table(key)) == nil` decides, without reading every field.
local function hash_fields_or_nil(key, fields)
  local t = hash_fields(key, fields)
  if next(t) == nil and redis.call('EXISTS', key) == 0 then
    return nil
  end
  return t
end

-- The exec_core fields a lease-checked call reads: the fence and lease
-- checks (resolve_fence, check_lease), err_not_active's details,
-- mark_expired's rewrite of the state vector and its history entry, the
-- released attempt's index and the flow to publish to.
local LEASE_FIELDS = {
  'lifecycle_phase', 'ownership_state', 'eligibility_state', 'terminal_outcome',
  'current_lease_id', 'current_lease_epoch', 'current_attempt_id', 'current_attempt_index',
  'current_worker_id', 'current_worker_instance_id', 'lease_expires_at', 'flow_id',
}

-- hash_fields_or_nil(key, LEASE_FIELDS), the table made by one
-- constructor (its size set once, not grown field by field as
-- hash_fields grows it); the hot path of complete reads it.
local function lease_core_or_nil(key)
  local v = redis.call('HMGET', key, unpack(LEASE_FIELDS))
  local t = {
    lifecycle_phase = v[1] or nil, ownership_state = v[2] or nil,
    eligibility_state = v[3] or nil, terminal_outcome = v[4] or nil,
    current_lease_id = v[5] or nil, current_lease_epoch = v[6] or nil,
    current_attempt_id = v[7] or nil, current_attempt_index = v[8] or nil,
    current_worker_id = v[9] or nil, current_worker_instance_id = v[10] or nil,
    lease_expires_at = v[11] or nil, flow_id = v[12] or nil,
  }
  if next(t) == nil and redis.call('EXISTS', key) == 0 then
    return nil
  end
  return t
end

-- Integer to decimal string without exponent or fraction.
local function int_str(n)
  return string.format('%d', math.floor(tonumber(n) or 0))
end

-- Key surgery. Every key of an execution shares its {fp:N} tag, so keys
-- that are not passed in KEYS can be rebuilt from any of them and still
-- land on the same slot.
local keyfmt = {}

-- First {...} hash tag of a key.
function keyfmt.tag(key)
  return string.match(key, '(%b{})')
end

-- The execution id embedded in an exec_core key: the text after the first
-- "}:" up to the trailing ":core".
function keyfmt.eid_of_core(core_key)
  local close = string.find(core_key, '}:', 1, true)
  if not close then return nil end
  local rest = string.sub(core_key, close + 2)
  local stop = string.find(rest, ':core', 1, true)
  if not stop then return nil end
  return string.sub(rest, 1, stop - 1)
end

function keyfmt.lane(tag, lane, suffix)
  return 'ff:idx:' .. tag .. ':lane:' .. lane .. ':' .. suffix
end

function keyfmt.attempt(tag, eid, idx, suffix)
  local k = 'ff:attempt:' .. tag .. ':' .. eid .. ':' .. tostring(idx)
  if suffix then k = k .. ':' .. suffix end
  return k
end

function keyfmt.stream_meta(tag, eid, idx)
  return 'ff:stream:' .. tag .. ':' .. eid .. ':' .. tostring(idx) .. ':meta'
end

function keyfmt.worker_leases(tag, wiid)
  return 'ff:idx:' .. tag .. ':worker:' .. (wiid or '') .. ':leases'
end

function keyfmt.exec(tag, eid, suffix)
  return 'ff:exec:' .. tag .. ':' .. eid .. ':' .. suffix
end

function keyfmt.policy_of_core(core_key)
  return (string.gsub(core_key, ':core$', ':policy'))
end

-- Appends an event to a lease history stream (approximate MAXLEN).
local function history_add(key, ...)
  redis.call('XADD', key, 'MAXLEN', '~', HISTORY_MAXLEN, '*', ...)
end

-- Publishes a flow member's terminal transition for the DAG engine.
local function publish_completion(eid, flow_id, outcome)
  if is_set(flow_id) then
    redis.call('PUBLISH', 'ff:dag:completions', cjson.encode({
      execution_id = eid, flow_id = flow_id, outcome = outcome }))
  end
end

-- The 4-detail execution_not_active reply the SDK uses to recognise a
-- replay of its own terminal call.
local function err_not_active(core)
  return err('execution_not_active',
    core.terminal_outcome or '',
    core.current_lease_epoch or '',
    core.lifecycle_phase or '',
    core.current_attempt_id or '')
end

-- Resolves the (lease_id, lease_epoch, attempt_id) fence. All three set:
-- returns the fence and true. All three empty: returns the server's current
-- triple and false. A mix: nil plus the partial_fence_triple reply.
local function resolve_fence(core, lease_id, lease_epoch, attempt_id)
  local a, b, c = is_set(lease_id), is_set(lease_epoch), is_set(attempt_id)
  if a or b or c then
    if not (a and b and c) then
      return nil, err('partial_fence_triple')
    end
    return {lease_id = lease_id, lease_epoch = lease_epoch, attempt_id = attempt_id}, true
  end
  return {
    lease_id = core.current_lease_id or '',
    lease_epoch = core.current_lease_epoch or '',
    attempt_id = core.current_attempt_id or '',
  }, false
end

-- Marks the current lease expired (idempotent): ownership becomes
-- lease_expired_reclaimable, an `expired` event is logged and an open
-- attempt stream is closed with reason lease_expired. Indexes are left
-- alone; reclaim, cancel or expiry clean them up.
local function mark_expired(core_key, history_key, core, now)
  if core.ownership_state == 'lease_expired_reclaimable' then
    return
  end
  redis.call('HSET', core_key,
    'lifecycle_phase', core.lifecycle_phase or 'active',
    'ownership_state', 'lease_expired_reclaimable',
    'eligibility_state', core.eligibility_state or 'not_applicable',
    'blocking_reason', 'waiting_for_worker',
    'blocking_detail', 'lease expired, awaiting reclaim',
    'terminal_outcome', core.terminal_outcome or 'none',
    'attempt_state', 'attempt_interrupted',
    'public_state', 'active',
    'lease_expired_at', now,
    'last_mutation_at', now)
  history_add(history_key,
    'event', 'expired',
    'lease_id', core.current_lease_id or '',
    'lease_epoch', core.current_lease_epoch or '',
    'attempt_index', core.current_attempt_index or '',
    'attempt_id', core.current_attempt_id or '',
    'worker_id', core.current_worker_id or '',
    'worker_instance_id', core.current_worker_instance_id or '',
    'ts', now)
  local idx = core.current_attempt_index
  local tag = keyfmt.tag(core_key)
  local eid = keyfmt.eid_of_core(core_key)
  if is_set(idx) and tag and eid then
    local meta = keyfmt.stream_meta(tag, eid, idx)
    if redis.call('EXISTS', meta) == 1 and not is_set(redis.call('HGET', meta, 'closed_at')) then
      redis.call('HSET', meta, 'closed_at', tostring(now), 'closed_reason', 'lease_expired')
    end
  end
end

-- Lease checks in FlowFabric's order: phase, revocation, expiry, identity.
-- With history_key set (write paths) an expired lease is marked expired
-- before lease_expired is returned. Returns nil when the fence holds.
local function check_lease(core, fence, now, core_key, history_key)
  if core.lifecycle_phase ~= 'active' then
    return err_not_active(core)
  end
  if core.ownership_state == 'lease_revoked' then
    return err('lease_revoked')
  end
  if (tonumber(core.lease_expires_at) or 0) <= now then
    if history_key then
      mark_expired(core_key, history_key, core, now)
    end
    return err('lease_expired')
  end
  if core.current_lease_id ~= fence.lease_id
    or core.current_lease_epoch ~= fence.lease_epoch
    or core.current_attempt_id ~= fence.attempt_id then
    return err('stale_lease')
  end
  return nil
end

-- Fields cleared on exec_core whenever a lease is released.
local LEASE_CLEAR_FIELDS = {
  'current_lease_id', '', 'current_worker_id', '', 'current_worker_instance_id', '',
  'lease_expires_at', '', 'lease_last_renewed_at', '', 'lease_renewal_deadline', '',
  'lease_expired_at', '', 'lease_revoked_at', '', 'lease_revoke_reason', '',
}

-- redis.call(cmd, key, ...) over the elements of list, at most 1,000 per
-- call (an even number, so field/value pairs stay whole): unpack of an
-- unbounded list overflows Lua's C stack ("too many results to unpack",
-- about 8,000 values), and a Lua error after a first write leaves that
-- write behind. Nothing is called for an empty list.
local function call_chunked(cmd, key, list)
  local n = #list
  for i = 1, n, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, n)))
  end
end

-- HSET key with the pairs of every table argument, in order.
local function hset_pairs(key, ...)
  local argv = {}
  for _, t in ipairs({...}) do
    for i = 1, #t do argv[#argv + 1] = t[i] end
  end
  call_chunked('HSET', key, argv)
end

-- ZREMs eid from every listed index key except `except` (nil entries
-- skipped) and SREMs it from the worker lease set.
local function zrem_indexes(eid, keys, worker_leases_key, except)
  for _, k in pairs(keys) do
    if k and k ~= '' and k ~= except then
      redis.call('ZREM', k, eid)
    end
  end
  if worker_leases_key and worker_leases_key ~= except then
    redis.call('SREM', worker_leases_key, eid)
  end
end

-- Every per-lane index an execution can sit in, rebuilt from tag and lane.
local function lane_index_keys(tag, lane)
  return {
    eligible = keyfmt.lane(tag, lane, 'eligible'),
    delayed = keyfmt.lane(tag, lane, 'delayed'),
    active = keyfmt.lane(tag, lane, 'active'),
    suspended = keyfmt.lane(tag, lane, 'suspended'),
    terminal = keyfmt.lane(tag, lane, 'terminal'),
    blocked_dependencies = keyfmt.lane(tag, lane, 'blocked:dependencies'),
    blocked_budget = keyfmt.lane(tag, lane, 'blocked:budget'),
    blocked_quota = keyfmt.lane(tag, lane, 'blocked:quota'),
    blocked_route = keyfmt.lane(tag, lane, 'blocked:route'),
    blocked_operator = keyfmt.lane(tag, lane, 'blocked:operator'),
  }
end

-- Eligible score: older first within a priority, higher priority first.
local function eligible_score(priority, created_at)
  return -((tonumber(priority) or 0) * PRIORITY_FACTOR) + (tonumber(created_at) or 0)
end

local function clamp_priority(p)
  p = math.floor(tonumber(p) or 0)
  if p < 0 then return 0 end
  if p > 9000 then return 9000 end
  return p
end

-- Parses a capability CSV into a set. Returns set, count or nil plus the
-- invalid_capabilities reply. kind is 'required' or 'worker'.
local function parse_caps(csv, kind)
  local set, n = {}, 0
  if not is_set(csv) then return set, 0 end
  if #csv > CAPS_MAX_BYTES then
    return nil, err('invalid_capabilities', kind .. ':too_many_bytes')
  end
  for tok in string.gmatch(csv, '[^,]+') do
    if not set[tok] then
      n = n + 1
      if n > CAPS_MAX_TOKENS then
        return nil, err('invalid_capabilities', kind .. ':too_many_tokens')
      end
      set[tok] = true
    end
  end
  return set, n
end

-- Sorted CSV of the required capabilities the worker lacks ('' if none).
local function missing_caps(required, worker)
  local out = {}
  for cap in pairs(required) do
    if not worker[cap] then out[#out + 1] = cap end
  end
  table.sort(out)
  return table.concat(out, ',')
end

-- The state vector of a freshly acquired lease (claim, claim-resumed,
-- reclaim, grant-and-claim), as HSET pairs for hset_pairs.
local CLAIMED_VECTOR = {
  'lifecycle_phase', 'active',
  'ownership_state', 'leased',
  'eligibility_state', 'not_applicable',
  'blocking_reason', 'none',
  'blocking_detail', '',
  'terminal_outcome', 'none',
  'attempt_state', 'running_attempt',
  'public_state', 'active',
}

-- Recreates the lease_current hash of a freshly acquired lease (DEL, then
-- HSET in FlowFabric's field order; last_renewed_at = acquired_at).
local function write_lease_current(key, l)
  redis.call('DEL', key)
  redis.call('HSET', key,
    'lease_id', l.lease_id,
    'lease_epoch', l.lease_epoch,
    'execution_id', l.execution_id,
    'attempt_id', l.attempt_id,
    'worker_id', l.worker_id,
    'worker_instance_id', l.worker_instance_id,
    'acquired_at', l.acquired_at,
    'expires_at', l.expires_at,
    'last_renewed_at', l.acquired_at,
    'renewal_deadline', l.renewal_deadline)
end
