-- Attempt output streams: frame append (durable, summary, best-effort)
-- and the two readers.

local frames = {}

frames.NULL_SENTINEL = '__ff_null__'

-- A decoded JSON value is an object when it is a table without a [1].
function frames.is_object(v)
  return type(v) == 'table' and (next(v) == nil or v[1] == nil)
end

-- RFC 7396 merge patch of patch into target (in place). Returns nil or an
-- error detail.
function frames.merge(target, patch, depth)
  if depth > 16 then return 'patch_depth_exceeded' end
  for k, v in pairs(patch) do
    if v == cjson.null then
      target[k] = nil
    elseif type(v) == 'table' and v[1] == nil and next(v) ~= nil then
      if type(target[k]) ~= 'table' or target[k][1] ~= nil then
        target[k] = {}
      end
      local e = frames.merge(target[k], v, depth + 1)
      if e then return e end
    else
      target[k] = v
    end
  end
  return nil
end

-- Replaces string leaves equal to the null sentinel with JSON null.
function frames.unsentinel(doc, depth)
  if depth > 32 or type(doc) ~= 'table' then return end
  for k, v in pairs(doc) do
    if v == frames.NULL_SENTINEL then
      doc[k] = cjson.null
    elseif type(v) == 'table' then
      frames.unsentinel(v, depth + 1)
    end
  end
end

---------------------------------------------------------------------------
-- ff_append_frame
-- KEYS(4): exec_core, stream, stream_meta, stream_summary.
-- ARGV(19): execution_id, attempt_index, lease_id, lease_epoch,
--   frame_type, ts, payload, encoding, correlation_id, source,
--   retention_maxlen, attempt_id, max_payload_bytes, stream_mode,
--   patch_kind, ttl_ms, maxlen_floor, maxlen_ceiling, ema_alpha.
---------------------------------------------------------------------------
redis.register_function('ff_append_frame', function(keys, args)
  if #keys < 3 or #args < 5 then
    return err('invalid_input', 'ff_append_frame needs 4 KEYS and 19 ARGV')
  end
  local eid, att_idx, lease_id, lease_epoch = args[1], args[2], args[3], args[4]
  local frame_type = args[5]
  local ts = args[6] or ''
  local payload = args[7] or ''
  local encoding = args[8] or 'utf8'
  local correlation = args[9] or ''
  local source = args[10] or 'worker'
  local attempt_id = args[12] or ''
  local mode = args[14] or ''
  local patch_kind = args[15] or ''
  local summary_key = keys[4] or ''
  local n = {}
  local specs = {
    {'retention_maxlen', 11, 0}, {'max_payload_bytes', 13, 65536}, {'ttl_ms', 16, 0},
    {'maxlen_floor', 17, 0}, {'maxlen_ceiling', 18, 0}, {'ema_alpha', 19, 0},
  }
  for _, s in ipairs(specs) do
    local v, e = susp.num_or(args[s[2]], s[3], s[1])
    if not v then return e end
    n[s[1]] = v
  end
  if n.retention_maxlen < 0 or n.retention_maxlen ~= math.floor(n.retention_maxlen) then
    return err('invalid_input', 'retention_maxlen must be a non-negative integer')
  end
  if n.maxlen_floor <= 0 then n.maxlen_floor = 64 end
  if n.maxlen_ceiling <= 0 then n.maxlen_ceiling = 16384 end
  if n.ema_alpha <= 0 or n.ema_alpha > 1 then n.ema_alpha = 0.2 end
  if n.maxlen_ceiling < n.maxlen_floor then n.maxlen_ceiling = n.maxlen_floor end
  if mode == '' then mode = 'durable' end

  if #payload > n.max_payload_bytes then
    return err('retention_limit_exceeded')
  end
  local core = redis.call('HMGET', keys[1], 'current_attempt_index', 'current_lease_id',
    'current_lease_epoch', 'lease_expires_at', 'lifecycle_phase', 'ownership_state')
  if core[5] ~= 'active' then return err('stream_closed') end
  if core[6] == 'lease_expired_reclaimable' or core[6] == 'lease_revoked' then
    return err('stale_owner_cannot_append')
  end
  local now = now_ms()
  if (tonumber(core[4] or '0') or 0) <= now
      or tostring(core[1]) ~= att_idx
      or core[2] ~= lease_id or tostring(core[3]) ~= lease_epoch then
    return err('stale_owner_cannot_append')
  end

  local meta = keys[3]
  if redis.call('EXISTS', meta) == 0 then
    redis.call('HSET', meta,
      'stream_id', eid .. ':' .. att_idx,
      'execution_id', eid,
      'attempt_id', attempt_id,
      'attempt_index', att_idx,
      'created_at', tostring(now),
      'closed_at', '',
      'closed_reason', '',
      'durability_mode', 'durable_full',
      'retention_maxlen', tostring(n.retention_maxlen),
      'last_sequence', '',
      'frame_count', '0',
      'total_bytes', '0',
      'last_frame_at', '',
      'has_durable_frame', '0')
  end
  if is_set(redis.call('HGET', meta, 'closed_at')) then
    return err('stream_closed')
  end

  -- Summary mode: merge the patch into the summary document first, so
  -- the frame carries the new version.
  local version = ''
  if mode == 'summary' then
    if summary_key == '' then
      return err('invalid_input', 'summary mode requires stream_summary key')
    end
    if patch_kind ~= 'json-merge-patch' and patch_kind ~= '' then
      return err('invalid_input', 'unsupported patch_kind')
    end
    local okp, patch = pcall(cjson.decode, payload)
    if not okp then
      return err('invalid_input', 'patch payload is not valid JSON')
    end
    if not frames.is_object(patch) then
      return err('invalid_input', 'patch must be a JSON object')
    end
    local doc = {}
    local stored = redis.call('HGET', summary_key, 'document')
    if stored and stored ~= '' then
      local okd, parsed = pcall(cjson.decode, stored)
      if not okd then
        return err('corruption', 'stored summary document not decodeable')
      end
      doc = parsed
    end
    local merr = frames.merge(doc, patch, 0)
    if merr then return err('invalid_input', merr) end
    frames.unsentinel(doc, 0)
    local encoded = cjson.encode(doc)
    local v = redis.call('HINCRBY', summary_key, 'version', 1)
    redis.call('HSET', summary_key,
      'document', encoded,
      'patch_kind', 'json-merge-patch',
      'last_updated_ms', tostring(now))
    if v == 1 then
      redis.call('HSET', summary_key, 'first_applied_ms', tostring(now))
    end
    version = tostring(v)
  end

  local entry = {
    keys[2], '*',
    'frame_type', frame_type,
    'ts', ts ~= '' and ts or tostring(now),
    'payload', payload,
    'encoding', encoding,
    'source', source,
    'mode', mode,
  }
  if correlation ~= '' then
    entry[#entry + 1] = 'correlation_id'; entry[#entry + 1] = correlation
  end
  if version ~= '' then
    entry[#entry + 1] = 'summary_version'; entry[#entry + 1] = version
  end
  if mode == 'best_effort' and n.ttl_ms > 0 then
    entry[#entry + 1] = 'ttl_ms'; entry[#entry + 1] = tostring(n.ttl_ms)
  end
  local id = redis.call('XADD', unpack(entry))

  local count = redis.call('HINCRBY', meta, 'frame_count', 1)
  redis.call('HINCRBY', meta, 'total_bytes', #payload)
  redis.call('HSET', meta, 'last_sequence', id, 'last_frame_at', tostring(now))
  if mode == 'durable' or mode == 'summary' then
    if redis.call('HGET', meta, 'has_durable_frame') ~= '1' then
      redis.call('HSET', meta, 'has_durable_frame', '1')
      redis.call('PERSIST', keys[2])
    end
  end

  if mode == 'summary' then
    redis.call('XTRIM', keys[2], 'MAXLEN', '~', 64)
  elseif mode == 'best_effort' then
    local prev = redis.call('HMGET', meta, 'ema_rate_hz', 'last_append_ts_ms')
    local prev_rate, prev_ts = tonumber(prev[1] or ''), tonumber(prev[2] or '')
    local ttl_s = math.max(n.ttl_ms, 1) / 1000.0
    local rate
    if prev_rate == nil or prev_ts == nil then
      rate = n.maxlen_floor / (ttl_s * 2.0)
    else
      local dt = now - prev_ts
      if dt <= 0 then dt = 1 end
      rate = n.ema_alpha * (1000.0 / dt) + (1.0 - n.ema_alpha) * prev_rate
    end
    local k = math.ceil(rate * ttl_s * 2.0)
    if k < n.maxlen_floor then k = n.maxlen_floor end
    if k > n.maxlen_ceiling then k = n.maxlen_ceiling end
    redis.call('XTRIM', keys[2], 'MAXLEN', '~', k)
    redis.call('HSET', meta,
      'ema_rate_hz', tostring(rate),
      'last_append_ts_ms', tostring(now),
      'maxlen_applied_last', tostring(k))
    if redis.call('HGET', meta, 'has_durable_frame') ~= '1' and n.ttl_ms > 0 then
      redis.call('PEXPIRE', keys[2], n.ttl_ms * 2)
    end
  else
    if n.retention_maxlen == 0 then
      redis.call('XTRIM', keys[2], 'MAXLEN', '~', 10000)
    else
      redis.call('XTRIM', keys[2], 'MAXLEN', '=', n.retention_maxlen)
    end
  end
  return ok(id, tostring(count), version)
end)

---------------------------------------------------------------------------
-- ff_read_attempt_stream
-- KEYS(2): stream, stream_meta. ARGV(4): from_id, to_id, count_limit,
--   visibility ("" | all | exclude_best_effort).
---------------------------------------------------------------------------
redis.register_function('ff_read_attempt_stream', function(keys, args)
  if #keys < 2 then
    return err('invalid_input', 'ff_read_attempt_stream needs 2 KEYS')
  end
  local from, to = args[1] or '-', args[2] or '+'
  local limit = tonumber(args[3] or '0')
  local visibility = args[4] or ''
  if limit == nil or limit < 1 then
    return err('invalid_input', 'count_limit must be >= 1')
  end
  if limit > 10000 then
    return err('invalid_input', 'count_limit_exceeds_hard_cap')
  end
  local entries = redis.pcall('XRANGE', keys[1], from, to, 'COUNT', limit)
  if type(entries) == 'table' and entries.err then
    return err('invalid_input', 'invalid stream id range')
  end
  if visibility == 'exclude_best_effort' then
    local kept = {}
    for _, e in ipairs(entries) do
      local m = cond.entry_field(e[2], 'mode') or 'durable'
      if m ~= 'best_effort' then kept[#kept + 1] = e end
    end
    entries = kept
  end
  local meta = redis.call('HMGET', keys[2], 'closed_at', 'closed_reason')
  return ok(entries, meta[1] or '', meta[2] or '')
end)

---------------------------------------------------------------------------
-- ff_read_summary
-- KEYS(1): stream_summary.
---------------------------------------------------------------------------
redis.register_function('ff_read_summary', with_keys(1, function(keys, args)
  if not keys[1] then
    return err('invalid_input', 'ff_read_summary needs 1 KEY')
  end
  if redis.call('EXISTS', keys[1]) == 0 then
    return ok('', '0', '', '0', '0')
  end
  local h = redis.call('HMGET', keys[1],
    'document', 'version', 'patch_kind', 'last_updated_ms', 'first_applied_ms')
  return ok(h[1] or '', h[2] or '0', h[3] or '', h[4] or '0', h[5] or '0')
end))
