-- Suspension and waitpoint functions, plus the waitpoint HMAC keystore
-- admin functions. The helper tables defined first (wphmac, cond, susp)
-- are also used by signal.lua, which is assembled after this file.

---------------------------------------------------------------------------
-- wphmac: waitpoint tokens. token = "<kid>:<40 hex>", the hex being
-- HMAC-SHA1(hex-decoded secret, "<waitpoint_id>|<waitpoint_key>|<created_at>").
-- Keystore hash fields: current_kid, secret:<kid>, expires_at:<kid>,
-- previous_kid, previous_expires_at.
---------------------------------------------------------------------------
local wphmac = {}

-- Hex text to bytes; nil unless every pair is two hex digits.
function wphmac.unhex(hex)
  if type(hex) ~= 'string' or #hex % 2 ~= 0 then
    return nil
  end
  local out = {}
  for i = 1, #hex, 2 do
    local pair = string.sub(hex, i, i + 1)
    if not string.find(pair, '^%x%x$') then
      return nil
    end
    out[#out + 1] = string.char(tonumber(pair, 16))
  end
  return table.concat(out)
end

-- Lowercase hex HMAC-SHA1 (RFC 2104, 64-byte block), or nil for a
-- malformed hex key.
function wphmac.hmac_hex(key_hex, msg)
  local key = wphmac.unhex(key_hex)
  if not key then
    return nil
  end
  if #key > 64 then
    key = wphmac.unhex(redis.sha1hex(key))
  end
  key = key .. string.rep('\0', 64 - #key)
  local inner_pad, outer_pad = {}, {}
  for i = 1, 64 do
    local b = string.byte(key, i)
    inner_pad[i] = string.char(bit.bxor(b, 0x36))
    outer_pad[i] = string.char(bit.bxor(b, 0x5c))
  end
  local inner = wphmac.unhex(redis.sha1hex(table.concat(inner_pad) .. msg))
  return redis.sha1hex(table.concat(outer_pad) .. inner)
end

-- Equality whose running time does not depend on where strings differ.
function wphmac.same(a, b)
  if type(a) ~= 'string' or type(b) ~= 'string' or #a ~= #b then
    return false
  end
  local acc = 0
  for i = 1, #a do
    acc = bit.bor(acc, bit.bxor(string.byte(a, i), string.byte(b, i)))
  end
  return acc == 0
end

function wphmac.message(wp_id, wp_key, created_at)
  return wp_id .. '|' .. wp_key .. '|' .. tostring(created_at)
end

-- Mints a token with the current kid. Returns the token, or nil and an
-- error code.
function wphmac.mint(store_key, wp_id, wp_key, created_at)
  if type(store_key) ~= 'string' or store_key == '' then
    return nil, 'invalid_keys_missing_hmac'
  end
  local store = hash_table(store_key)
  local kid = store.current_kid
  local secret = kid and store['secret:' .. kid]
  if not secret then
    return nil, 'hmac_secret_not_initialized'
  end
  local digest = wphmac.hmac_hex(secret, wphmac.message(wp_id, wp_key, created_at))
  if not digest then
    return nil, 'invalid_secret'
  end
  return kid .. ':' .. digest
end

-- Checks a presented token. Returns nil when valid, else an error code.
-- The current kid never expires; any other kid needs its secret and an
-- expires_at:<kid> that is a positive number not before now.
function wphmac.verify(store_key, token, wp_id, wp_key, created_at, now)
  if type(store_key) ~= 'string' or store_key == '' then
    return 'invalid_keys_missing_hmac'
  end
  if type(token) ~= 'string' or token == '' then
    return 'missing_token'
  end
  local sep = string.find(token, ':', 1, true)
  if not sep or sep < 2 or sep >= #token then
    return 'invalid_token'
  end
  local kid = string.sub(token, 1, sep - 1)
  local presented = string.sub(token, sep + 1)
  if #presented ~= 40 then
    return 'invalid_token'
  end
  local store = hash_table(store_key)
  if not store.current_kid then
    return 'hmac_secret_not_initialized'
  end
  local secret
  if kid == store.current_kid then
    secret = store['secret:' .. kid]
  elseif store['secret:' .. kid] then
    local exp = tonumber(store['expires_at:' .. kid])
    if not exp or exp <= 0 or exp < now then
      return 'token_expired'
    end
    secret = store['secret:' .. kid]
  end
  if not secret then
    return 'invalid_token'
  end
  local expected = wphmac.hmac_hex(secret, wphmac.message(wp_id, wp_key, created_at))
  if not expected then
    return 'invalid_secret'
  end
  if not wphmac.same(expected, presented) then
    return 'invalid_token'
  end
  return nil
end

---------------------------------------------------------------------------
-- cond: resume conditions (matcher form and composite trees).
---------------------------------------------------------------------------
local cond = {}

cond.BLOCKING = {
  waiting_for_signal = 'waiting_for_signal',
  waiting_for_approval = 'waiting_for_approval',
  waiting_for_callback = 'waiting_for_callback',
  waiting_for_tool_result = 'waiting_for_tool_result',
  waiting_for_operator_review = 'paused_by_operator',
  paused_by_policy = 'paused_by_policy',
  paused_by_budget = 'waiting_for_budget',
  step_boundary = 'waiting_for_signal',
  manual_pause = 'paused_by_operator',
}

function cond.blocking_for(reason_code)
  return cond.BLOCKING[reason_code] or 'waiting_for_signal'
end

-- Decodes resume_condition_json into a condition table. Returns the
-- table, or nil when the JSON is not an object.
function cond.parse(json)
  local okd, spec = pcall(cjson.decode, json or '')
  if not okd or type(spec) ~= 'table' then
    return nil
  end
  if spec.composite then
    local c = {
      composite = true, condition_type = 'composite', match_mode = 'composite',
      minimum_signal_count = 1, total_matchers = 0, satisfied_count = 0,
      matchers = {}, closed = false,
    }
    if not (spec.v and tonumber(spec.v) ~= 1) then
      c.tree = spec.tree
    end
    return c
  end
  local names = spec.required_signal_names
  if type(names) ~= 'table' then names = {} end
  local matchers = {}
  if #names == 0 then
    matchers[1] = {name = '', satisfied = false, signal_id = ''}
  else
    for i, n in ipairs(names) do
      matchers[i] = {name = tostring(n), satisfied = false, signal_id = ''}
    end
  end
  return {
    condition_type = spec.condition_type or 'signal_set',
    match_mode = spec.signal_match_mode or 'any',
    minimum_signal_count = tonumber(spec.minimum_signal_count or '1') or 1,
    total_matchers = #matchers,
    satisfied_count = 0,
    matchers = matchers,
    closed = false,
  }
end

-- Writes a condition table into a waitpoint's condition hash.
function cond.write(key, c, now)
  if c.composite then
    redis.call('HSET', key,
      'condition_type', 'composite',
      'composite', '1',
      'match_mode', 'composite',
      'minimum_signal_count', '1',
      'total_matchers', '0',
      'satisfied_count', '0',
      'closed', c.closed and '1' or '0',
      'updated_at', tostring(now),
      'tree_json', c.tree and cjson.encode(c.tree) or '')
    return
  end
  local f = {
    'condition_type', c.condition_type,
    'match_mode', c.match_mode,
    'minimum_signal_count', tostring(c.minimum_signal_count),
    'total_matchers', tostring(c.total_matchers),
    'satisfied_count', tostring(c.satisfied_count),
    'closed', c.closed and '1' or '0',
    'updated_at', tostring(now),
  }
  for i, m in ipairs(c.matchers) do
    local p = 'matcher:' .. (i - 1) .. ':'
    f[#f + 1] = p .. 'name'; f[#f + 1] = m.name
    f[#f + 1] = p .. 'satisfied'; f[#f + 1] = m.satisfied and '1' or '0'
    f[#f + 1] = p .. 'signal_id'; f[#f + 1] = m.signal_id
  end
  call_chunked('HSET', key, f)
end

-- Marks the first open matcher that accepts signal_name. True if one did.
function cond.offer(c, signal_name, signal_id)
  for i = 1, c.total_matchers do
    local m = c.matchers[i]
    if not m.satisfied and (m.name == '' or m.name == signal_name) then
      m.satisfied = true
      m.signal_id = signal_id or ''
      c.satisfied_count = c.satisfied_count + 1
      return true
    end
  end
  return false
end

-- The match-mode rule on a satisfied count.
function cond.met(mode, count, minimum, total)
  if mode == 'all' then
    return count >= total
  end
  return count >= minimum
end

function cond.satisfied(c)
  return cond.met(c.match_mode, c.satisfied_count, c.minimum_signal_count, c.total_matchers)
end

-- Value of a field in a stream entry's flat field list.
function cond.entry_field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end

-- Composite trees -------------------------------------------------------

function cond.matcher_accepts(m, signal_name)
  if type(m) ~= 'table' or m.kind == nil or m.kind == 'Wildcard' then
    return true
  end
  if m.kind == 'ByName' then
    return m.name == signal_name
  end
  return false
end

-- Single nodes bound to wp_key and Count nodes listing it, found by a
-- depth-first walk through AllOf nodes.
function cond.candidates(tree, wp_key)
  local found = {}
  local function walk(node)
    if type(node) ~= 'table' then return end
    if node.kind == 'Single' then
      if node.waitpoint_key == wp_key then found[#found + 1] = node end
    elseif node.kind == 'Count' then
      for _, k in ipairs(type(node.waitpoints) == 'table' and node.waitpoints or {}) do
        if k == wp_key then
          found[#found + 1] = node
          break
        end
      end
    elseif node.kind == 'AllOf' then
      for _, child in ipairs(type(node.members) == 'table' and node.members or {}) do
        walk(child)
      end
    end
  end
  walk(tree)
  return found
end

local function path_of(node)
  return type(node.path) == 'string' and node.path or ''
end

cond.COUNT_PREFIX = {DistinctSignals = 'sig:', DistinctSources = 'src:'}

function cond.node_true(node, tokens)
  if type(node) ~= 'table' then return false end
  if node.kind == 'Single' then
    return tokens['leaf:' .. path_of(node)] == true
  elseif node.kind == 'AllOf' then
    for _, child in ipairs(type(node.members) == 'table' and node.members or {}) do
      local tok = (child.kind == 'Single' and 'leaf:' or 'node:') .. path_of(child)
      if not tokens[tok] then return false end
    end
    return true
  elseif node.kind == 'Count' then
    if tokens['timeout:*'] then return true end
    local prefix = cond.COUNT_PREFIX[node.count_kind] or 'wp:'
    local n = 0
    for tok in pairs(tokens) do
      if string.sub(tok, 1, #prefix) == prefix then n = n + 1 end
    end
    return n >= (tonumber(node.n) or 1)
  end
  return false
end

function cond.load_set(key)
  local t = {}
  for _, m in ipairs(redis.call('SMEMBERS', key)) do t[m] = true end
  return t
end

-- Applies one signal to a composite tree. sig has signal_id, signal_name,
-- source_type, source_identity. Returns {effect, resume, closer, satisfiers}.
function cond.composite_deliver(tree, set_key, wp_id, wp_key, sig)
  local cands = cond.candidates(tree, wp_key)
  if #cands == 0 then
    return {effect = 'signal_ignored_not_in_condition'}
  end
  local accepted, added = false, false
  for _, node in ipairs(cands) do
    if cond.matcher_accepts(node.matcher, sig.signal_name) then
      accepted = true
      local tok
      if node.kind == 'Single' then
        tok = 'leaf:' .. path_of(node)
      elseif node.count_kind == 'DistinctSignals' then
        tok = 'sig:' .. (sig.signal_id or '')
      elseif node.count_kind == 'DistinctSources' then
        tok = 'src:' .. (sig.source_type or '') .. ':' .. (sig.source_identity or '')
      else
        tok = 'wp:' .. (wp_id or '')
      end
      if redis.call('SADD', set_key, tok) == 1 then
        added = true
        redis.call('SADD', set_key .. ':signals', sig.signal_id)
      end
    end
  end
  if not accepted then
    return {effect = 'signal_ignored_matcher_failed'}
  end
  if not added then
    return {effect = 'appended_to_waitpoint_duplicate'}
  end
  local tokens = cond.load_set(set_key)
  local function lift(node)
    if type(node) ~= 'table' or node.kind ~= 'AllOf' then return end
    for _, child in ipairs(type(node.members) == 'table' and node.members or {}) do
      if child.kind ~= 'Single' and cond.node_true(child, tokens) then
        local tok = 'node:' .. path_of(child)
        if redis.call('SADD', set_key, tok) == 1 then tokens[tok] = true end
        lift(child)
      end
    end
  end
  lift(tree)
  if cond.node_true(tree, tokens) then
    return {
      effect = 'resume_condition_satisfied', resume = true, closer = sig.signal_id,
      satisfiers = cjson.encode(redis.call('SMEMBERS', set_key .. ':signals')),
    }
  end
  return {effect = 'appended_to_waitpoint'}
end

-- member_map fields wp:<key>:<path> -> <path> for the candidates of key.
function cond.seed_member_map(map_key, tree, wp_key)
  local f = {}
  for _, node in ipairs(cond.candidates(tree, wp_key)) do
    f[#f + 1] = 'wp:' .. wp_key .. ':' .. path_of(node)
    f[#f + 1] = path_of(node)
  end
  call_chunked('HSET', map_key, f)
end

-- Deletes a suspension's composite bookkeeping.
function cond.cleanup(susp_key)
  redis.call('DEL', susp_key .. ':satisfied_set')
  redis.call('DEL', susp_key .. ':satisfied_set:signals')
  redis.call('DEL', susp_key .. ':member_map')
end

---------------------------------------------------------------------------
-- susp: suspension lifecycle pieces shared with signal.lua.
---------------------------------------------------------------------------
local susp = {}

-- The extra waitpoint bindings recorded on a suspension record.
function susp.extras(record)
  local raw = record and record.additional_waitpoints_json
  if not is_set(raw) then return {} end
  local okd, list = pcall(cjson.decode, raw)
  if not okd or type(list) ~= 'table' then return {} end
  local out = {}
  for _, b in ipairs(list) do
    if type(b) == 'table' and type(b.waitpoint_id) == 'string' and b.waitpoint_id ~= '' then
      out[#out + 1] = b
    end
  end
  return out
end

-- Closes the extra waitpoints (and their condition hashes) of a
-- suspension. A signal that satisfies the condition closes them as
-- FlowFabric's deliver_signal does (satisfied set): the waitpoint hash
-- also gets satisfied_at, and the condition hash closed_reason
-- 'satisfied' while the waitpoint's close_reason is 'resumed'.
function susp.close_extras(tag, record, now, reason, satisfied)
  local cond_reason = reason
  if satisfied then cond_reason = 'satisfied' end
  for _, b in ipairs(susp.extras(record)) do
    local wp = 'ff:wp:' .. tag .. ':' .. b.waitpoint_id
    if redis.call('EXISTS', wp) == 1 then
      if satisfied then
        redis.call('HSET', wp, 'state', 'closed', 'satisfied_at', tostring(now), 'closed_at', tostring(now),
          'close_reason', reason)
      else
        redis.call('HSET', wp, 'state', 'closed', 'closed_at', tostring(now),
          'close_reason', reason)
      end
    end
    if redis.call('EXISTS', wp .. ':condition') == 1 then
      redis.call('HSET', wp .. ':condition', 'closed', '1', 'closed_at', tostring(now),
        'closed_reason', cond_reason)
    end
  end
end

-- Moves a suspended execution back to runnable (eligible now, or delayed
-- by delay_ms) and updates the lane indexes.
function susp.resume_core(core_key, core, eid, now, delay_ms, detail_delayed,
                          suspended_key, eligible_key, delayed_key)
  local es, br, bd, ps = 'eligible_now', 'waiting_for_worker', '', 'waiting'
  if delay_ms > 0 then
    es, br, bd, ps = 'not_eligible_until_time', 'waiting_for_resume_delay', detail_delayed, 'delayed'
  end
  redis.call('HSET', core_key,
    'lifecycle_phase', 'runnable',
    'ownership_state', 'unowned',
    'eligibility_state', es,
    'blocking_reason', br,
    'blocking_detail', bd,
    'terminal_outcome', 'none',
    'attempt_state', 'attempt_interrupted',
    'public_state', ps,
    'current_suspension_id', '',
    'current_waitpoint_id', '',
    'last_transition_at', tostring(now),
    'last_mutation_at', tostring(now))
  redis.call('ZREM', suspended_key, eid)
  if delay_ms > 0 then
    redis.call('ZADD', delayed_key, now + delay_ms, eid)
  else
    redis.call('ZADD', eligible_key, eligible_score(core.priority, core.created_at), eid)
  end
  return ps
end

-- Optional numeric ARGV: "" or missing gives the default, anything else
-- must parse. Returns the number or nil plus the invalid_input reply.
function susp.num_or(v, default, name)
  if not is_set(v) then return default end
  return num_arg(v, name)
end

-- Splits s on tabs, keeping empty fields.
function susp.split_tabs(s)
  local out, start = {}, 1
  while true do
    local i = string.find(s, '\t', start, true)
    if not i then
      out[#out + 1] = string.sub(s, start)
      return out
    end
    out[#out + 1] = string.sub(s, start, i - 1)
    start = i + 1
  end
end

function susp.waitpoint_fields(wp_id, eid, att_idx, susp_id, wp_key, token, now, expires)
  return {
    'waitpoint_id', wp_id,
    'execution_id', eid,
    'attempt_index', att_idx,
    'suspension_id', susp_id,
    'waitpoint_key', wp_key,
    'waitpoint_token', token,
    'state', 'active',
    'created_at', tostring(now),
    'activated_at', tostring(now),
    'expires_at', expires,
    'signal_count', '0',
    'matched_signal_count', '0',
    'last_signal_at', '',
  }
end

---------------------------------------------------------------------------
-- ff_suspend_execution
-- KEYS(18+3E): exec_core, attempt_hash, lease_current, lease_history,
--   lease_expiry, worker_leases, suspension_current, waitpoint,
--   waitpoint_signals, suspension_timeout, pending_waitpoint_expiry,
--   lane_active, lane_suspended, waitpoints, waitpoint_condition,
--   attempt_timeout, hmac_secrets, suspend_dedup|noop; then per extra
--   waitpoint: waitpoint, waitpoint_signals, waitpoint_condition.
-- ARGV(20+2E): execution_id, attempt_index, attempt_id, lease_id,
--   lease_epoch, suspension_id, waitpoint_id, waitpoint_key, reason_code,
--   requested_by, timeout_at, resume_condition_json, resume_policy_json,
--   continuation_metadata_pointer, use_pending_waitpoint, timeout_behavior,
--   lease_history_maxlen, idempotency_key, dedup_ttl_ms,
--   num_extra_waitpoints, then (waitpoint_id, waitpoint_key) per extra.
---------------------------------------------------------------------------
redis.register_function('ff_suspend_execution', function(keys, args)
  if #keys < 18 or #args < 9 then
    return err('invalid_input', 'ff_suspend_execution needs 18 KEYS and 20 ARGV')
  end
  local eid = args[1]
  local att_idx = args[2]
  local attempt_id, lease_id, lease_epoch = args[3] or '', args[4] or '', args[5] or ''
  local susp_id = args[6] or ''
  local wp_id, wp_key = args[7] or '', args[8] or ''
  local reason_code = args[9] or ''
  local requested_by = args[10] or ''
  local timeout_at = args[11] or ''
  local cond_json = args[12] or ''
  local policy_json = args[13] or ''
  local continuation = args[14] or ''
  local use_pending = args[15] or ''
  local timeout_behavior = args[16] or 'fail'
  local idem = args[18] or ''
  if is_set(timeout_at) and not tonumber(timeout_at) then
    return err('invalid_input', 'timeout_at must be a number, got: ' .. timeout_at)
  end
  local maxlen, e1 = susp.num_or(args[17], 1000, 'lease_history_maxlen')
  if not maxlen then return e1 end
  local dedup_ttl, e2 = susp.num_or(args[19], 0, 'dedup_ttl_ms')
  if not dedup_ttl then return e2 end
  local n_extra, e3 = susp.num_or(args[20], 0, 'num_extra_waitpoints')
  if not n_extra then return e3 end

  -- 1. Extra waitpoint bindings.
  local extras = {}
  for k = 1, n_extra do
    local id, key = args[20 + 2 * k - 1], args[20 + 2 * k]
    local kbase = 18 + 3 * (k - 1)
    if not is_set(id) or not is_set(key) or not keys[kbase + 3] then
      return err('additional_waitpoint_binding_malformed')
    end
    extras[k] = {id = id, key = key, wp = keys[kbase + 1], cond = keys[kbase + 3]}
  end

  -- 2. Idempotent replay of the first outcome.
  local dedup_key = keys[18]
  local dedup_on = idem ~= '' and is_set(dedup_key)
  if dedup_on then
    local stored = redis.call('HGET', dedup_key, 'outcome')
    if stored then
      local parts = susp.split_tabs(stored)
      if #parts >= 5 then
        local status = parts[1] == 'ALREADY_SATISFIED' and 'ALREADY_SATISFIED' or 'OK'
        local reply = {1, status}
        for i = 2, #parts do reply[#reply + 1] = parts[i] end
        return reply
      end
    end
  end
  local now = now_ms()

  -- 3. Lease and attempt binding.
  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  local fence, fence_err = resolve_fence(core, lease_id, lease_epoch, attempt_id)
  if not fence then return fence_err end
  if fence_err == false then return err('fence_required') end
  local lease_err = check_lease(core, fence, now, keys[1], keys[4])
  if lease_err then return lease_err end
  if tostring(core.current_attempt_index) ~= att_idx then
    return err('invalid_lease_for_suspend')
  end
  local c = cond.parse(cond_json)
  if not c then
    return err('invalid_input', 'resume_condition_json must be a JSON object')
  end

  -- 4. A previous suspension: open is an error, closed is archived.
  if redis.call('EXISTS', keys[7]) == 1 then
    if is_set(redis.call('HGET', keys[7], 'closed_at')) then
      local old = redis.call('HGET', keys[7], 'waitpoint_id')
      if is_set(old) then redis.call('SADD', keys[14], old) end
      redis.call('DEL', keys[7])
    else
      return err('already_suspended')
    end
  end

  local expires = is_set(timeout_at) and timeout_at or ''
  local token = ''
  local function remember(status, tail)
    if dedup_on then
      redis.call('HSET', dedup_key, 'outcome', status .. '\t' .. table.concat(tail, '\t'))
      if dedup_ttl > 0 then redis.call('PEXPIRE', dedup_key, dedup_ttl) end
    end
  end

  -- 5. Activate the pending waitpoint, or create a fresh one.
  if use_pending == '1' then
    local wp = hash_table(keys[8])
    if next(wp) == nil then return err('waitpoint_not_found') end
    if wp.state ~= 'pending' then return err('waitpoint_not_pending') end
    if wp.execution_id ~= eid or tostring(wp.attempt_index) ~= tostring(att_idx) then
      return err('invalid_waitpoint_for_execution')
    end
    local wexp = tonumber(wp.expires_at)
    if is_set(wp.expires_at) and (not wexp or wexp <= now) then
      return err('pending_waitpoint_expired')
    end
    wp_id, wp_key = wp.waitpoint_id or '', wp.waitpoint_key or ''
    if not is_set(wp.waitpoint_token) then return err('waitpoint_not_token_bound') end
    token = wp.waitpoint_token
    redis.call('HSET', keys[8],
      'suspension_id', susp_id,
      'state', 'active',
      'activated_at', tostring(now),
      'expires_at', expires)
    redis.call('ZREM', keys[11], wp_id)
    local buffered = redis.call('XRANGE', keys[9], '-', '+')
    for _, entry in ipairs(buffered) do
      cond.offer(c, cond.entry_field(entry[2], 'signal_name'), cond.entry_field(entry[2], 'signal_id'))
    end
    if #buffered > 0 and cond.satisfied(c) then
      redis.call('HSET', keys[8],
        'state', 'closed',
        'satisfied_at', tostring(now),
        'closed_at', tostring(now),
        'close_reason', 'resumed')
      cond.write(keys[15], c, now)
      remember('ALREADY_SATISFIED', {susp_id, wp_id, wp_key, token, '0'})
      return ok_status('ALREADY_SATISFIED', susp_id, wp_id, wp_key, token, '0')
    end
    cond.write(keys[15], c, now)
  else
    local t, code = wphmac.mint(keys[17], wp_id, wp_key, now)
    if not t then return err(code) end
    token = t
    redis.call('HSET', keys[8], unpack(susp.waitpoint_fields(
      wp_id, eid, att_idx, susp_id, wp_key, token, now, expires)))
    cond.write(keys[15], c, now)
  end

  -- 6. Extra waitpoints (fresh suspensions only).
  if #extras > 0 and use_pending == '1' then
    return err('use_pending_with_extras_unsupported')
  end
  local tail = {susp_id, wp_id, wp_key, token, tostring(#extras)}
  local bindings = {}
  for _, x in ipairs(extras) do
    local t, code = wphmac.mint(keys[17], x.id, x.key, now)
    if not t then return err(code) end
    redis.call('HSET', x.wp, unpack(susp.waitpoint_fields(
      x.id, eid, att_idx, susp_id, x.key, t, now, expires)))
    cond.write(x.cond, cond.parse(cond_json), now)
    redis.call('SADD', keys[14], x.id)
    tail[#tail + 1] = x.id
    tail[#tail + 1] = x.key
    tail[#tail + 1] = t
    bindings[#bindings + 1] = '{"waitpoint_id":' .. cjson.encode(x.id)
      .. ',"waitpoint_key":' .. cjson.encode(x.key) .. '}'
  end

  -- 7. Core: suspended, lease released.
  redis.call('SADD', keys[14], wp_id)
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'suspended',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', cond.blocking_for(reason_code),
    'blocking_detail', 'suspended: waitpoint ' .. wp_id .. ' awaiting ' .. reason_code,
    'terminal_outcome', 'none',
    'attempt_state', 'attempt_interrupted',
    'public_state', 'suspended',
    'current_lease_id', '',
    'current_worker_id', '',
    'current_worker_instance_id', '',
    'lease_expires_at', '',
    'lease_last_renewed_at', '',
    'lease_renewal_deadline', '',
    'current_suspension_id', susp_id,
    'current_waitpoint_id', wp_id,
    'last_transition_at', tostring(now),
    'last_mutation_at', tostring(now))

  -- 8. Attempt paused.
  redis.call('HSET', keys[2],
    'attempt_state', 'suspended',
    'suspended_at', tostring(now),
    'suspension_id', susp_id)

  -- 9. Lease and its indexes.
  redis.call('DEL', keys[3])
  redis.call('ZREM', keys[5], eid)
  redis.call('SREM', keys[6], eid)
  redis.call('ZREM', keys[12], eid)
  redis.call('ZREM', keys[16], eid)
  redis.call('XADD', keys[4], 'MAXLEN', '~', maxlen, '*',
    'event', 'released',
    'lease_id', lease_id,
    'lease_epoch', lease_epoch,
    'attempt_index', att_idx,
    'attempt_id', core.current_attempt_id or '',
    'reason', 'suspend',
    'ts', tostring(now))

  -- 10. Suspension record (+ composite member map).
  redis.call('HSET', keys[7],
    'suspension_id', susp_id,
    'execution_id', eid,
    'attempt_index', att_idx,
    'waitpoint_id', wp_id,
    'waitpoint_key', wp_key,
    'additional_waitpoints_json', '[' .. table.concat(bindings, ',') .. ']',
    'reason_code', reason_code,
    'requested_by', requested_by,
    'created_at', tostring(now),
    'timeout_at', timeout_at,
    'timeout_behavior', timeout_behavior,
    'resume_condition_json', cond_json,
    'resume_policy_json', policy_json,
    'continuation_metadata_pointer', continuation,
    'buffered_signal_summary_json', '{"total_count":0,"matched_count":0,"signal_names":[]}',
    'last_signal_at', '',
    'satisfied_at', '',
    'closed_at', '',
    'close_reason', '')
  if c.composite then
    cond.seed_member_map(keys[7] .. ':member_map', c.tree, wp_key)
    for _, x in ipairs(extras) do
      cond.seed_member_map(keys[7] .. ':member_map', c.tree, x.key)
    end
  end

  -- 11. Suspended indexes.
  redis.call('ZADD', keys[13], is_set(timeout_at) and tonumber(timeout_at) or SUSPENDED_NO_TIMEOUT, eid)
  if is_set(timeout_at) then
    redis.call('ZADD', keys[10], tonumber(timeout_at), eid)
  end
  remember('OK', tail)
  local reply = {1, 'OK'}
  for _, v in ipairs(tail) do reply[#reply + 1] = v end
  return reply
end)

---------------------------------------------------------------------------
-- ff_resume_execution
-- KEYS(8): exec_core, suspension_current, waitpoint, waitpoint_signals,
--   suspension_timeout, lane_eligible, lane_delayed, lane_suspended.
-- ARGV(3): execution_id, trigger_type, resume_delay_ms.
---------------------------------------------------------------------------
redis.register_function('ff_resume_execution', function(keys, args)
  if #keys < 8 or #args < 1 then
    return err('invalid_input', 'ff_resume_execution needs 8 KEYS and 3 ARGV')
  end
  local eid = args[1]
  local delay, derr = susp.num_or(args[3], 0, 'resume_delay_ms')
  if not delay then return derr end
  local now = now_ms()
  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'suspended' then return err('execution_not_suspended') end
  local record = hash_table(keys[2])
  if not is_set(record.suspension_id) or is_set(record.closed_at) then
    return err('execution_not_suspended')
  end
  local ps = susp.resume_core(keys[1], core, eid, now, delay,
    'resume delay ' .. tostring(delay) .. 'ms', keys[8], keys[6], keys[7])
  redis.call('HSET', keys[3],
    'state', 'closed',
    'satisfied_at', tostring(now),
    'closed_at', tostring(now),
    'close_reason', 'resumed')
  redis.call('HSET', keys[2],
    'satisfied_at', tostring(now),
    'closed_at', tostring(now),
    'close_reason', 'resumed')
  redis.call('ZREM', keys[5], eid)
  cond.cleanup(keys[2])
  susp.close_extras(keyfmt.tag(keys[1]), record, now, 'resumed')
  return ok(ps)
end)

---------------------------------------------------------------------------
-- ff_create_pending_waitpoint
-- KEYS(4): exec_core, waitpoint, pending_waitpoint_expiry, hmac_secrets.
-- ARGV(5): execution_id, attempt_index, waitpoint_id, waitpoint_key,
--   expires_at.
---------------------------------------------------------------------------
redis.register_function('ff_create_pending_waitpoint', function(keys, args)
  if #keys < 3 or #args < 5 then
    return err('invalid_input', 'ff_create_pending_waitpoint needs 4 KEYS and 5 ARGV')
  end
  local eid, att_idx, wp_id, wp_key, expires_at = args[1], args[2], args[3], args[4], args[5]
  local exp, xerr = num_arg(expires_at, 'expires_at')
  if not exp then return xerr end
  local now = now_ms()
  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'active' then return err_not_active(core) end
  if core.ownership_state ~= 'leased' then return err('no_active_lease') end
  if tostring(core.current_attempt_index) ~= att_idx then return err('stale_lease') end
  if redis.call('EXISTS', keys[2]) == 1 then
    local state = redis.call('HGET', keys[2], 'state')
    if state == 'pending' or state == 'active' then
      return err('waitpoint_already_exists')
    end
  end
  local token, code = wphmac.mint(keys[4], wp_id, wp_key, now)
  if not token then return err(code) end
  redis.call('HSET', keys[2],
    'waitpoint_id', wp_id,
    'execution_id', eid,
    'attempt_index', att_idx,
    'suspension_id', '',
    'waitpoint_key', wp_key,
    'waitpoint_token', token,
    'state', 'pending',
    'created_at', tostring(now),
    'activated_at', '',
    'satisfied_at', '',
    'closed_at', '',
    'expires_at', expires_at,
    'close_reason', '',
    'signal_count', '0',
    'matched_signal_count', '0',
    'last_signal_at', '')
  redis.call('ZADD', keys[3], exp, wp_id)
  return ok(wp_id, wp_key, token)
end)

---------------------------------------------------------------------------
-- ff_expire_suspension
-- KEYS(12): exec_core, suspension_current, waitpoint, waitpoint_condition,
--   attempt_hash, stream_meta, suspension_timeout, lane_suspended,
--   lane_terminal, lane_eligible, lane_delayed, lease_history (unused).
-- ARGV(1): execution_id.
---------------------------------------------------------------------------
redis.register_function('ff_expire_suspension', function(keys, args)
  if #keys < 11 or #args < 1 then
    return err('invalid_input', 'ff_expire_suspension needs 12 KEYS and 1 ARGV')
  end
  local eid = args[1]
  local now = now_ms()
  local core = hash_table(keys[1])
  if next(core) == nil then
    redis.call('ZREM', keys[7], eid)
    return ok('not_found_cleaned')
  end
  if core.lifecycle_phase ~= 'suspended' then
    redis.call('ZREM', keys[7], eid)
    return ok('not_suspended_cleaned')
  end
  local record = hash_table(keys[2])
  if not is_set(record.suspension_id) or is_set(record.closed_at) then
    redis.call('ZREM', keys[7], eid)
    return ok('no_active_suspension_cleaned')
  end
  local timeout_at = tonumber(record.timeout_at or '0') or 0
  if timeout_at == 0 or timeout_at > now then
    return ok('not_yet_due')
  end
  local behavior = record.timeout_behavior or 'fail'
  local tag = keyfmt.tag(keys[1])

  if behavior == 'auto_resume' or behavior == 'auto_resume_with_timeout_signal' then
    local reason = 'timed_out_auto_resume'
    susp.resume_core(keys[1], core, eid, now, 0, '', keys[8], keys[10], keys[11])
    redis.call('HSET', keys[3], 'state', 'closed', 'closed_at', tostring(now), 'close_reason', reason)
    redis.call('HSET', keys[4], 'closed', '1', 'closed_at', tostring(now), 'closed_reason', reason)
    redis.call('HSET', keys[2], 'closed_at', tostring(now), 'close_reason', reason)
    redis.call('ZREM', keys[7], eid)
    cond.cleanup(keys[2])
    susp.close_extras(tag, record, now, reason)
    return ok('auto_resume', 'waiting')
  end

  if behavior == 'escalate' then
    redis.call('HSET', keys[1],
      'lifecycle_phase', 'suspended',
      'ownership_state', 'unowned',
      'eligibility_state', 'not_applicable',
      'blocking_reason', 'paused_by_operator',
      'blocking_detail', 'suspension escalated: timeout at ' .. tostring(timeout_at),
      'terminal_outcome', 'none',
      'attempt_state', core.attempt_state or 'attempt_interrupted',
      'public_state', 'suspended',
      'last_mutation_at', tostring(now))
    redis.call('HSET', keys[2],
      'reason_code', 'waiting_for_operator_review',
      'timeout_at', '',
      'timeout_behavior', '')
    redis.call('ZREM', keys[7], eid)
    return ok('escalate', 'suspended')
  end

  local outcome, reason, attempt_end = 'failed', 'timed_out_fail', 'ended_failure'
  if behavior == 'cancel' then
    outcome, reason, attempt_end = 'cancelled', 'timed_out_cancel', 'ended_cancelled'
  elseif behavior == 'expire' then
    outcome, reason = 'expired', 'timed_out_expire'
  end
  redis.call('HSET', keys[1],
    'lifecycle_phase', 'terminal',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', outcome,
    'attempt_state', 'attempt_terminal',
    'public_state', outcome,
    'failure_reason', 'suspension_timeout:' .. behavior,
    'completed_at', tostring(now),
    'current_suspension_id', '',
    'current_waitpoint_id', '',
    'last_transition_at', tostring(now),
    'last_mutation_at', tostring(now))
  if is_set(core.current_attempt_index) then
    redis.call('HSET', keys[5],
      'attempt_state', attempt_end,
      'ended_at', tostring(now),
      'failure_reason', 'suspension_timeout:' .. behavior,
      'suspended_at', '',
      'suspension_id', '')
  end
  if redis.call('EXISTS', keys[6]) == 1 then
    redis.call('HSET', keys[6], 'closed_at', tostring(now), 'closed_reason', 'suspension_timeout')
  end
  redis.call('HSET', keys[3], 'state', 'closed', 'closed_at', tostring(now), 'close_reason', reason)
  redis.call('HSET', keys[4], 'closed', '1', 'closed_at', tostring(now), 'closed_reason', reason)
  redis.call('HSET', keys[2], 'closed_at', tostring(now), 'close_reason', reason)
  cond.cleanup(keys[2])
  susp.close_extras(tag, record, now, reason)
  redis.call('ZREM', keys[7], eid)
  redis.call('ZREM', keys[8], eid)
  redis.call('ZADD', keys[9], now, eid)
  publish_completion(eid, core.flow_id, outcome)
  return ok(behavior, outcome)
end)

---------------------------------------------------------------------------
-- ff_close_waitpoint
-- KEYS(3): exec_core (unused), waitpoint, pending_waitpoint_expiry.
-- ARGV(2): waitpoint_id, reason.
---------------------------------------------------------------------------
redis.register_function('ff_close_waitpoint', function(keys, args)
  if #keys < 3 or #args < 1 then
    return err('invalid_input', 'ff_close_waitpoint needs 3 KEYS and 2 ARGV')
  end
  local wp_id, reason = args[1], args[2] or 'proactive_close'
  local now = now_ms()
  local state = redis.call('HGET', keys[2], 'state')
  if redis.call('EXISTS', keys[2]) == 0 then return err('waitpoint_not_found') end
  if state ~= 'pending' and state ~= 'active' then
    if state == 'closed' or state == 'expired' then return ok('already_closed') end
    return err('waitpoint_not_open')
  end
  redis.call('HSET', keys[2], 'state', 'closed', 'closed_at', tostring(now), 'close_reason', reason)
  redis.call('ZREM', keys[3], wp_id)
  return ok()
end)

---------------------------------------------------------------------------
-- ff_rotate_waitpoint_hmac_secret
-- KEYS(1): hmac_secrets. ARGV(3): new_kid, new_secret_hex, grace_ms.
---------------------------------------------------------------------------
redis.register_function('ff_rotate_waitpoint_hmac_secret', with_keys(1, function(keys, args)
  local store = keys[1]
  if not store then
    return err('invalid_input', 'ff_rotate_waitpoint_hmac_secret needs 1 KEY')
  end
  local kid, hex, grace_s = args[1], args[2], args[3]
  if type(kid) ~= 'string' or kid == '' or string.find(kid, ':', 1, true) then
    return err('invalid_kid')
  end
  if type(hex) ~= 'string' or hex == '' or #hex % 2 ~= 0 or string.find(hex, '[^%x]') then
    return err('invalid_secret_hex')
  end
  local grace = tonumber(grace_s)
  if not grace or grace ~= grace or grace < 0 or grace > 9007199254740991
      or grace ~= math.floor(grace) then
    return err('invalid_grace_ms')
  end
  local now = now_ms()
  local current = redis.call('HGET', store, 'current_kid') or nil
  if current == kid then
    local stored = redis.call('HGET', store, 'secret:' .. kid)
    if not stored then
      redis.call('HSET', store, 'secret:' .. kid, hex)
    elseif stored ~= hex then
      return err('rotation_conflict', kid)
    end
    return ok('noop', kid)
  end
  local flat = redis.call('HGETALL', store)
  local gone, count = {}, 0
  for i = 1, #flat, 2 do
    local f = flat[i]
    if string.sub(f, 1, 11) == 'expires_at:' then
      local exp = tonumber(flat[i + 1])
      if not exp or exp <= 0 or exp < now then
        gone[#gone + 1] = f
        gone[#gone + 1] = 'secret:' .. string.sub(f, 12)
        count = count + 1
      end
    end
  end
  call_chunked('HDEL', store, gone)
  local until_s = tostring(now + grace)
  if current then
    redis.call('HSET', store,
      'previous_kid', current,
      'previous_expires_at', until_s,
      'expires_at:' .. current, until_s,
      'current_kid', kid,
      'secret:' .. kid, hex)
  else
    redis.call('HSET', store, 'current_kid', kid, 'secret:' .. kid, hex)
  end
  return ok('rotated', current or '', kid, tostring(count))
end))

---------------------------------------------------------------------------
-- ff_list_waitpoint_hmac_kids
-- KEYS(1): hmac_secrets. Returns current kid, count, then (kid, expires_at)
-- for every non-current kid still inside its grace window.
---------------------------------------------------------------------------
redis.register_function('ff_list_waitpoint_hmac_kids', with_keys(1, function(keys, args)
  if not keys[1] then
    return err('invalid_input', 'ff_list_waitpoint_hmac_kids needs 1 KEY')
  end
  local flat = redis.call('HGETALL', keys[1])
  local now = now_ms()
  local current, out, n = '', {}, 0
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    if f == 'current_kid' then
      current = v
    elseif string.sub(f, 1, 11) == 'expires_at:' then
      local exp = tonumber(v)
      if exp and exp > 0 and exp >= now then
        out[#out + 1] = string.sub(f, 12)
        out[#out + 1] = v
        n = n + 1
      end
    end
  end
  return ok(current, tostring(n), unpack(out))
end))
