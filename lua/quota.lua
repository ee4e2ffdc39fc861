-- Quotas: sliding-window rate limits and a concurrency counter, all on the
-- policy's {q:K} partition.
--
-- ff_check_admission_and_record replies with a bare status array
-- ({"ADMITTED"}, {"ALREADY_ADMITTED"}, {"RATE_EXCEEDED", ms},
-- {"CONCURRENCY_EXCEEDED"}), not the {1, status} convention; only its
-- number-validation failures use {0, "invalid_input", ...}.

-- KEYS: def, window ZSET (unused), concurrency, admitted_set (unused),
-- quota_policies. ARGV: quota_policy_id, window_seconds,
-- max_requests_per_window, max_concurrent, now_ms.
redis.register_function('ff_create_quota_policy', with_keys(5, function(keys, args)
  local qid = args[1]
  if redis.call('EXISTS', keys[1]) == 1 then
    return ok_status('ALREADY_SATISFIED', qid or '')
  end
  for i = 1, 5 do
    if args[i] == nil then
      return err('invalid_input', 'missing argument ' .. i)
    end
  end
  redis.call('HSET', keys[1],
    'quota_policy_id', qid,
    'requests_per_window_seconds', args[2],
    'max_requests_per_window', args[3],
    'active_concurrency_cap', args[4],
    'created_at', args[5])
  redis.call('SET', keys[3], '0')
  redis.call('SADD', keys[5], qid)
  return ok(qid)
end))

-- KEYS: window ZSET, concurrency, def (unused), admitted:<eid> guard,
-- admitted_set. ARGV: now_ms, window_seconds, rate_limit, concurrency_cap,
-- execution_id, jitter_ms.
redis.register_function('ff_check_admission_and_record', with_keys(5, function(keys, args)
  local now, e = num_arg(args[1], 'now_ms')
  if e then return e end
  local window_s
  window_s, e = num_arg(args[2], 'window_seconds')
  if e then return e end
  local rate
  rate, e = num_arg(args[3], 'rate_limit')
  if e then return e end
  local cap
  cap, e = num_arg(args[4], 'concurrency_cap')
  if e then return e end
  local eid = args[5]
  if eid == nil then
    return err('invalid_input', 'execution_id required')
  end
  local jitter = 0
  if is_set(args[6]) then
    jitter, e = num_arg(args[6], 'jitter_ms')
    if e then return e end
  end

  local window_ms = window_s * 1000

  if redis.call('EXISTS', keys[4]) == 1 then
    return {'ALREADY_ADMITTED'}
  end

  redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', now - window_ms)

  if rate > 0 and redis.call('ZCARD', keys[1]) >= rate then
    local oldest = redis.call('ZRANGE', keys[1], 0, 0, 'WITHSCORES')
    local wait = 0
    if #oldest >= 2 then
      wait = tonumber(oldest[2]) + window_ms - now
      if wait < 0 then wait = 0 end
    end
    local extra = 0
    if jitter > 0 then
      extra = math.random(0, jitter)
    end
    return {'RATE_EXCEEDED', tostring(wait + extra)}
  end

  if cap > 0 then
    local active = tonumber(redis.call('GET', keys[2]) or '0') or 0
    if active >= cap then
      return {'CONCURRENCY_EXCEEDED'}
    end
  end

  redis.call('ZADD', keys[1], now, eid)
  if window_ms > 0 then
    redis.call('SET', keys[4], '1', 'PX', window_ms, 'NX')
  end
  if cap > 0 then
    redis.call('INCR', keys[2])
  end
  redis.call('SADD', keys[5], eid)
  return {'ADMITTED'}
end))

-- KEYS: admitted:<eid> guard, admitted_set, concurrency.
-- ARGV: execution_id.
redis.register_function('ff_release_admission', with_keys(3, function(keys, args)
  local eid = args[1]
  if eid == nil then
    return err('invalid_input', 'execution_id required')
  end
  redis.call('DEL', keys[1])
  redis.call('SREM', keys[2], eid)
  local current = tonumber(redis.call('GET', keys[3]) or '0') or 0
  if current > 0 then
    redis.call('DECR', keys[3])
  end
  return ok('released')
end))
