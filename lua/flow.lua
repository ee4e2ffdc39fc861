-- Flows: the flow record, membership, dependency edges (staged on the flow,
-- applied to the child), inbound edge groups (all_of / any_of / quorum),
-- dependency resolution with the skip cascade, sibling-cancel groups,
-- flow cancel with its durable backlog, and replay.
--
-- A flow and all its members share one {fp:N} slot, so sibling exec_core
-- keys and flow edge hashes are rebuilt from the hash tag.

-- File-local helpers, grouped in one table to spare top-level locals.
local flowx = {}

flowx.MAX_CYCLE_NODES = 1000

function flowx.terminal_flow(state)
  return state == 'cancelled' or state == 'completed' or state == 'failed'
end

-- Would an edge up -> down close a cycle? Walks breadth-first from down
-- along out:<eid> edge sets looking for up. More than MAX_CYCLE_NODES
-- visited nodes counts as a cycle (conservative).
function flowx.reaches(prefix, from, target)
  local seen, level, visited = {}, {from}, 0
  while #level > 0 do
    local nxt = {}
    for _, node in ipairs(level) do
      if node == target then return true end
      if not seen[node] then
        seen[node] = true
        visited = visited + 1
        if visited > flowx.MAX_CYCLE_NODES then return true end
        for _, edge in ipairs(redis.call('SMEMBERS', prefix .. ':out:' .. node)) do
          local down = redis.call('HGET', prefix .. ':edge:' .. edge, 'downstream_execution_id')
          if is_set(down) and not seen[down] then
            nxt[#nxt + 1] = down
          end
        end
      end
    end
    level = nxt
  end
  return false
end

-- attempt_state after a dependency flip: none/unset becomes
-- pending_first_attempt, anything else is kept.
function flowx.flip_attempt_state(s)
  if not is_set(s) or s == 'none' then return 'pending_first_attempt' end
  return s
end

-- Moves a runnable, unowned child blocked on dependencies to eligible.
function flowx.make_eligible(K, core, now)
  redis.call('HSET', K.core,
    'lifecycle_phase', core.lifecycle_phase,
    'ownership_state', core.ownership_state or 'unowned',
    'eligibility_state', 'eligible_now',
    'blocking_reason', 'waiting_for_worker',
    'blocking_detail', '',
    'terminal_outcome', 'none',
    'attempt_state', flowx.flip_attempt_state(core.attempt_state),
    'public_state', 'waiting',
    'last_transition_at', now,
    'last_mutation_at', now)
  redis.call('ZREM', K.blocked, core.execution_id or '')
  redis.call('ZADD', K.eligible, eligible_score(core.priority, core.created_at), core.execution_id or '')
end

function flowx.waiting_on_deps(core)
  return core.lifecycle_phase == 'runnable'
    and core.ownership_state == 'unowned'
    and core.terminal_outcome == 'none'
    and core.eligibility_state == 'blocked_by_dependencies'
end

-- COPYs the upstream result over the child payload when the edge passes
-- data and the child is not terminal. Returns 'data_injected' or ''.
function flowx.inject(K, dep, core)
  if is_set(dep.data_passing_ref) and core.terminal_outcome == 'none' then
    if redis.call('COPY', K.upstream_result, K.payload, 'REPLACE') == 1 then
      return 'data_injected'
    end
  end
  return ''
end

-- Terminates a not-yet-terminal child as skipped. A running or
-- interrupted attempt is ended (ended_cancelled / dependency_impossible)
-- and its stream closed; lease indexes are left to the scanners. Returns
-- 'child_skipped' or ''.
function flowx.skip(K, core, now, now_n)
  if core.terminal_outcome ~= 'none' then return '' end
  local att = core.attempt_state or 'none'
  if att == 'running_attempt' or att == 'attempt_interrupted' then
    att = 'attempt_terminal'
    redis.call('HSET', K.attempt,
      'attempt_state', 'ended_cancelled',
      'ended_at', now,
      'failure_reason', 'dependency_impossible')
    if redis.call('EXISTS', K.stream_meta) == 1 then
      redis.call('HSET', K.stream_meta,
        'closed_at', now,
        'closed_reason', 'dependency_impossible')
    end
  elseif is_set(att) and att ~= 'none' then
    att = 'none'
  end
  redis.call('HSET', K.core,
    'lifecycle_phase', 'terminal',
    'ownership_state', 'unowned',
    'eligibility_state', 'not_applicable',
    'blocking_reason', 'none',
    'blocking_detail', '',
    'terminal_outcome', 'skipped',
    'attempt_state', att,
    'public_state', 'skipped',
    'completed_at', now,
    'last_transition_at', now,
    'last_mutation_at', now)
  redis.call('ZREM', K.blocked, core.execution_id or '')
  redis.call('ZADD', K.terminal, now_n, core.execution_id or '')
  if is_set(core.flow_id) and is_set(core.execution_id) then
    publish_completion(core.execution_id, core.flow_id, 'skipped')
  end
  return 'child_skipped'
end

-- Upstream ids of the child's inbound edges whose exec_core exists and is
-- not terminal, in SMEMBERS order.
function flowx.running_siblings(K, A)
  local out = {}
  if not (is_set(K.incoming) and is_set(A.edge_prefix)) then return out end
  for _, edge in ipairs(redis.call('SMEMBERS', K.incoming)) do
    local up = redis.call('HGET', A.edge_prefix .. edge, 'upstream_execution_id')
    if is_set(up) then
      local phase = redis.call('HGET', 'ff:exec:' .. A.tag .. ':' .. up .. ':core', 'lifecycle_phase')
      if is_set(phase) and phase ~= 'terminal' then
        out[#out + 1] = up
      end
    end
  end
  return out
end

-- any_of / quorum resolution: only the edge-group counters decide;
-- deps_meta counters are left alone (the unresolved set is maintained).
function flowx.resolve_group(K, A, dep, variant)
  local bucket = 'failed'
  if A.outcome == 'success' then
    bucket = 'succeeded'
  elseif A.outcome == 'skipped' then
    bucket = 'skipped'
  end
  redis.call('HSET', K.dep,
    'state', bucket == 'succeeded' and 'satisfied' or 'impossible',
    'last_resolved_at', A.now)
  redis.call('SREM', K.unresolved, A.edge_id)
  redis.call('HINCRBY', K.group, bucket, 1)

  local g = hash_table(K.group)
  local n = tonumber(g.n or '0') or 0
  local good = tonumber(g.succeeded or '0') or 0
  local bad = (tonumber(g.failed or '0') or 0) + (tonumber(g.skipped or '0') or 0)
  local k = 1
  if variant == 'quorum' then
    k = tonumber(g.k or '1') or 1
    if k < 1 then k = 1 end
  end
  if good + bad > n then
    return err('invariant_violation',
      'edgegroup counters exceed n: ' .. tostring(good + bad) .. '/' .. tostring(n))
  end
  local prior = g.group_state or 'pending'
  if prior == 'satisfied' or prior == 'impossible' or prior == 'cancelled' then
    return ok('already_fired', '')
  end

  local state
  if good >= k then
    state = 'satisfied'
  elseif bad > n - k then
    state = 'impossible'
  else
    return ok('pending', '')
  end

  redis.call('HSET', K.group, 'group_state', state)
  if state == 'satisfied' then
    redis.call('HSET', K.group, 'satisfied_at', A.now)
  end
  if (g.on_satisfied or '') == 'cancel_remaining' then
    redis.call('HSET', K.group,
      'cancel_siblings_pending_flag', 'true',
      'cancel_siblings_reason',
      state == 'satisfied' and 'sibling_quorum_satisfied' or 'sibling_quorum_impossible')
    redis.call('HSET', K.group, 'cancel_siblings_pending_members',
      table.concat(flowx.running_siblings(K, A), '|'))
    if is_set(K.pending_groups) and is_set(A.flow_id) and is_set(A.downstream) then
      redis.call('SADD', K.pending_groups, A.flow_id .. '|' .. A.downstream)
    end
  end

  local core = hash_table(K.core)
  if next(core) == nil then return ok(state, '') end
  if state == 'satisfied' then
    local injected = ''
    if bucket == 'succeeded' then injected = flowx.inject(K, dep, core) end
    if flowx.waiting_on_deps(core) then
      flowx.make_eligible(K, core, A.now)
    end
    return ok('satisfied', injected)
  end
  return ok('impossible', flowx.skip(K, core, A.now, A.now_n))
end

-- KEYS: flow_core, members (unused), flow_index.
-- ARGV: flow_id, flow_kind, namespace, now_ms (ignored: server TIME).
redis.register_function('ff_create_flow', with_keys(3, function(keys, args)
  local flow_id = args[1]
  if flow_id == nil then
    return err('invalid_input', 'flow_id required')
  end
  local now = now_ms()
  redis.call('SADD', keys[3], flow_id)
  if redis.call('EXISTS', keys[1]) == 1 then
    return ok_status('ALREADY_SATISFIED', flow_id)
  end
  redis.call('HSET', keys[1],
    'flow_id', flow_id,
    'flow_kind', args[2] or '',
    'namespace', args[3] or '',
    'graph_revision', 0,
    'node_count', 0,
    'edge_count', 0,
    'public_flow_state', 'open',
    'created_at', now,
    'last_mutation_at', now)
  return ok(flow_id)
end))

-- KEYS: flow_core, members, flow_index, exec_core.
-- ARGV: flow_id, execution_id, now_ms (ignored: server TIME).
redis.register_function('ff_add_execution_to_flow', with_keys(4, function(keys, args)
  local flow_id, eid = args[1], args[2]
  if flow_id == nil or eid == nil then
    return err('invalid_input', 'flow_id and execution_id required')
  end
  local now = now_ms()
  local flow = hash_table(keys[1])
  if next(flow) == nil then
    return err('flow_not_found')
  end
  if flowx.terminal_flow(flow.public_flow_state or '') then
    return err('flow_already_terminal')
  end
  if redis.call('EXISTS', keys[4]) == 0 then
    return err('execution_not_found')
  end

  redis.call('SADD', keys[3], flow_id)
  local current = redis.call('HGET', keys[4], 'flow_id')
  if is_set(current) and current ~= flow_id then
    return err('already_member_of_different_flow:' .. current)
  end
  if redis.call('SISMEMBER', keys[2], eid) == 1 then
    redis.call('HSET', keys[4], 'flow_id', flow_id)
    return ok_status('ALREADY_SATISFIED', eid, redis.call('HGET', keys[1], 'node_count') or '0')
  end

  redis.call('SADD', keys[2], eid)
  redis.call('HSET', keys[4], 'flow_id', flow_id)
  local nodes = redis.call('HINCRBY', keys[1], 'node_count', 1)
  redis.call('HINCRBY', keys[1], 'graph_revision', 1)
  redis.call('HSET', keys[1], 'last_mutation_at', now)
  return ok(eid, tostring(nodes))
end))

-- KEYS: flow_core, members, flow_index (unused), pending_cancels,
-- cancel_backlog. ARGV: flow_id, reason, cancellation_policy, now_ms
-- (ignored), grace_ms ("" = 30000).
redis.register_function('ff_cancel_flow', with_keys(5, function(keys, args)
  local flow_id = args[1]
  local grace = 30000
  if args[5] ~= nil and args[5] ~= '' then
    local g = tonumber(args[5])
    if not g or g ~= g or g < 0 or g > 9007199254740991 or g ~= math.floor(g) then
      return err('invalid_grace_ms')
    end
    grace = g
  end
  if flow_id == nil then
    return err('invalid_input', 'flow_id required')
  end
  local reason, policy = args[2] or '', args[3] or ''
  local now = now_ms()

  local flow = hash_table(keys[1])
  if next(flow) == nil then
    return err('flow_not_found')
  end
  if flowx.terminal_flow(flow.public_flow_state or '') then
    return err('flow_already_terminal')
  end

  local members = redis.call('SMEMBERS', keys[2])
  redis.call('HSET', keys[1],
    'public_flow_state', 'cancelled',
    'cancelled_at', now,
    'cancel_reason', reason,
    'cancellation_policy', policy,
    'last_mutation_at', now)

  if policy == 'cancel_all' and #members > 0 then
    for first = 1, #members, 1000 do
      local chunk = {}
      for j = first, math.min(first + 999, #members) do
        chunk[#chunk + 1] = members[j]
      end
      redis.call('SADD', keys[4], unpack(chunk))
    end
    redis.call('ZADD', keys[5], now + grace, flow_id)
  end

  local reply = {1, 'OK', policy}
  for _, m in ipairs(members) do
    reply[#reply + 1] = m
  end
  return reply
end))

-- KEYS: pending_cancels, cancel_backlog. ARGV: execution_id, flow_id.
redis.register_function('ff_ack_cancel_member', with_keys(2, function(keys, args)
  if args[1] == nil or args[2] == nil then
    return err('invalid_input', 'execution_id and flow_id required')
  end
  redis.call('SREM', keys[1], args[1])
  if redis.call('EXISTS', keys[1]) == 0 then
    redis.call('ZREM', keys[2], args[2])
  end
  return ok()
end))

-- KEYS: flow_core, members, edge, out:<up>, in:<down>, grant (unused).
-- ARGV: flow_id, edge_id, upstream_eid, downstream_eid, dependency_kind,
-- data_passing_ref, expected_graph_revision, now_ms.
redis.register_function('ff_stage_dependency_edge', with_keys(5, function(keys, args)
  local A = {
    flow_id = args[1],
    edge_id = args[2],
    up = args[3],
    down = args[4],
    kind = args[5] or 'success_only',
    data_ref = args[6] or '',
    expected = args[7],
    now = args[8],
  }
  if A.up == A.down then
    return err('self_referencing_edge')
  end
  local flow = hash_table(keys[1])
  if next(flow) == nil then
    return err('flow_not_found')
  end
  if flowx.terminal_flow(flow.public_flow_state or '') then
    return err('flow_already_terminal')
  end
  if tostring(flow.graph_revision or '0') ~= A.expected then
    return err('stale_graph_revision')
  end
  if A.flow_id == nil or A.edge_id == nil or A.up == nil or A.down == nil or A.now == nil then
    return err('invalid_input', 'flow_id, edge_id, upstream, downstream and now_ms required')
  end
  if redis.call('SISMEMBER', keys[2], A.up) == 0
    or redis.call('SISMEMBER', keys[2], A.down) == 0 then
    return err('execution_not_in_flow')
  end
  if flowx.reaches(string.sub(keys[1], 1, -6), A.down, A.up) then
    return err('cycle_detected')
  end
  if redis.call('EXISTS', keys[3]) == 1 then
    return err('dependency_already_exists')
  end

  redis.call('HSET', keys[3],
    'edge_id', A.edge_id,
    'flow_id', A.flow_id,
    'upstream_execution_id', A.up,
    'downstream_execution_id', A.down,
    'dependency_kind', A.kind,
    'satisfaction_condition', 'all_required',
    'data_passing_ref', A.data_ref,
    'edge_state', 'pending',
    'created_at', A.now,
    'created_by', 'engine')
  redis.call('SADD', keys[4], A.edge_id)
  redis.call('SADD', keys[5], A.edge_id)
  local rev = redis.call('HINCRBY', keys[1], 'graph_revision', 1)
  redis.call('HINCRBY', keys[1], 'edge_count', 1)
  redis.call('HSET', keys[1], 'last_mutation_at', A.now)
  return ok(A.edge_id, tostring(rev))
end))

-- KEYS: flow_core, edgegroup:<down>.
-- ARGV: policy_variant, on_satisfied, k, now_ms.
redis.register_function('ff_set_edge_group_policy', with_keys(2, function(keys, args)
  local variant = args[1]
  local on_satisfied = args[2] or ''
  local k = tonumber(args[3] or '0') or 0
  if redis.call('EXISTS', keys[1]) == 0 then
    return err('flow_not_found')
  end
  if variant ~= 'all_of' and variant ~= 'any_of' and variant ~= 'quorum' then
    return err('invalid_input', 'unsupported_policy_variant: ' .. tostring(variant))
  end
  if variant == 'quorum' and k < 1 then
    return err('invalid_input', 'quorum k must be >= 1')
  end
  if variant ~= 'all_of' and on_satisfied ~= 'cancel_remaining' and on_satisfied ~= 'let_run' then
    return err('invalid_input', 'on_satisfied required for any_of/quorum: cancel_remaining | let_run')
  end
  if (tonumber(redis.call('HGET', keys[2], 'n') or '0') or 0) > 0 then
    return err('invalid_input', 'edge_group_policy_already_fixed: dependencies already staged')
  end
  if redis.call('HGET', keys[2], 'policy_variant') == variant then
    return ok('already_set')
  end
  if args[4] == nil then
    return err('invalid_input', 'now_ms required')
  end
  redis.call('HSET', keys[2],
    'policy_variant', variant,
    'on_satisfied', on_satisfied,
    'k', tostring(k),
    'n', '0',
    'succeeded', '0',
    'failed', '0',
    'skipped', '0',
    'group_state', 'pending',
    'created_at', args[4])
  return ok('set')
end))

-- KEYS: exec_core, deps_meta, deps_unresolved, dep:<edge>, lane eligible,
-- lane blocked:dependencies, deps_all_edges, edgegroup:<child> (optional).
-- ARGV: flow_id, edge_id, upstream_eid, graph_revision, dependency_kind,
-- data_passing_ref, now_ms.
redis.register_function('ff_apply_dependency_to_child', with_keys(7, function(keys, args)
  local flow_id, edge_id, now = args[1], args[2], args[7]
  if flow_id == nil or edge_id == nil or args[3] == nil or args[4] == nil or now == nil then
    return err('invalid_input', 'flow_id, edge_id, upstream_eid, graph_revision and now_ms required')
  end
  local core = hash_table(keys[1])
  if next(core) == nil then
    return err('execution_not_found')
  end
  if is_set(core.flow_id) and core.flow_id ~= flow_id then
    return err('execution_already_in_flow')
  end
  if redis.call('EXISTS', keys[4]) == 1 then
    return ok('already_applied')
  end

  redis.call('HSET', keys[4],
    'edge_id', edge_id,
    'flow_id', flow_id,
    'upstream_execution_id', args[3],
    'downstream_execution_id', core.execution_id or '',
    'dependency_kind', args[5] or 'success_only',
    'state', 'unsatisfied',
    'data_passing_ref', args[6] or '',
    'last_resolved_at', '')
  redis.call('SADD', keys[3], edge_id)
  redis.call('SADD', keys[7], edge_id)
  local unresolved = redis.call('HINCRBY', keys[2], 'unsatisfied_required_count', 1)
  redis.call('HSET', keys[2],
    'flow_id', flow_id,
    'last_flow_graph_revision', args[4],
    'last_dependency_update_at', now)

  local group = keys[8]
  if is_set(group) then
    if not redis.call('HGET', group, 'policy_variant') then
      redis.call('HSET', group,
        'policy_variant', 'all_of',
        'n', '1',
        'succeeded', '0',
        'group_state', 'pending')
    else
      redis.call('HINCRBY', group, 'n', 1)
    end
  end

  if core.lifecycle_phase == 'runnable' and core.terminal_outcome == 'none' then
    redis.call('HSET', keys[1],
      'lifecycle_phase', core.lifecycle_phase,
      'ownership_state', core.ownership_state or 'unowned',
      'eligibility_state', 'blocked_by_dependencies',
      'blocking_reason', 'waiting_for_children',
      'blocking_detail', unresolved .. ' dep(s) unresolved incl ' .. edge_id,
      'terminal_outcome', 'none',
      'attempt_state', core.attempt_state or 'pending_first_attempt',
      'public_state', 'waiting_children',
      'last_transition_at', now,
      'last_mutation_at', now)
    redis.call('ZREM', keys[5], core.execution_id or '')
    redis.call('ZADD', keys[6], tonumber(core.created_at or '0') or 0, core.execution_id or '')
  end
  return ok(tostring(unresolved))
end))

-- KEYS: exec_core, deps_meta, deps_unresolved, dep:<edge>, lane eligible,
-- lane terminal, lane blocked:dependencies, child attempt hash, child
-- stream meta, child payload, upstream result, [12] edgegroup:<child>,
-- [13] in:<child>, [14] pending_cancel_groups.
-- ARGV: edge_id, upstream terminal_outcome, now_ms, [4] flow_id,
-- [5] downstream eid. The 11-KEYS / 3-ARGV form resolves as all_of and
-- never enqueues sibling cancels.
redis.register_function('ff_resolve_dependency', with_keys(11, function(keys, args)
  local K = {
    core = keys[1], meta = keys[2], unresolved = keys[3], dep = keys[4],
    eligible = keys[5], terminal = keys[6], blocked = keys[7],
    attempt = keys[8], stream_meta = keys[9], payload = keys[10],
    upstream_result = keys[11], group = keys[12],
    incoming = keys[13] or '', pending_groups = keys[14] or '',
  }
  local A = {
    edge_id = args[1], outcome = args[2], now = args[3],
    flow_id = args[4] or '', downstream = args[5] or '',
    tag = '', edge_prefix = '',
  }
  local e
  A.now_n, e = num_arg(A.now, 'now_ms')
  if e then return e end
  if A.edge_id == nil then
    return err('invalid_input', 'edge_id required')
  end
  if is_set(K.group) then
    A.tag = string.match(K.group, '(%b{})') or ''
    if is_set(A.flow_id) then
      A.edge_prefix = 'ff:flow:' .. A.tag .. ':' .. A.flow_id .. ':edge:'
    end
  end

  local dep = hash_table(K.dep)
  if next(dep) == nil then
    return err('invalid_dependency')
  end
  if dep.state == 'satisfied' or dep.state == 'impossible' then
    return ok('already_resolved')
  end

  local has_group = is_set(K.group) and redis.call('EXISTS', K.group) == 1
  if has_group then
    local variant = redis.call('HGET', K.group, 'policy_variant')
    if variant == 'any_of' or variant == 'quorum' then
      return flowx.resolve_group(K, A, dep, variant)
    end
  end

  if A.outcome == 'success' then
    redis.call('HSET', K.dep, 'state', 'satisfied', 'last_resolved_at', A.now)
    redis.call('SREM', K.unresolved, A.edge_id)
    local remaining = redis.call('HINCRBY', K.meta, 'unsatisfied_required_count', -1)
    redis.call('HSET', K.meta, 'last_dependency_update_at', A.now)
    if has_group then
      redis.call('HINCRBY', K.group, 'succeeded', 1)
      if remaining == 0 then
        redis.call('HSET', K.group, 'group_state', 'satisfied')
      end
    end
    local core = hash_table(K.core)
    if next(core) == nil then return ok('satisfied', '') end
    local injected = flowx.inject(K, dep, core)
    if remaining == 0 and flowx.waiting_on_deps(core) then
      flowx.make_eligible(K, core, A.now)
    end
    return ok('satisfied', injected)
  end

  redis.call('HSET', K.dep, 'state', 'impossible', 'last_resolved_at', A.now)
  redis.call('SREM', K.unresolved, A.edge_id)
  redis.call('HINCRBY', K.meta, 'unsatisfied_required_count', -1)
  redis.call('HINCRBY', K.meta, 'impossible_required_count', 1)
  redis.call('HSET', K.meta, 'last_dependency_update_at', A.now)
  if has_group then
    redis.call('HINCRBY', K.group, 'failed', 1)
    redis.call('HSET', K.group, 'group_state', 'impossible')
  end
  local core = hash_table(K.core)
  if next(core) == nil then return ok('impossible', '') end
  return ok('impossible', flowx.skip(K, core, A.now, A.now_n))
end))

-- KEYS: pending_cancel_groups, edgegroup:<down>.
-- ARGV: flow_id, downstream_eid.
redis.register_function('ff_drain_sibling_cancel_group', with_keys(2, function(keys, args)
  local flow_id, down = args[1] or '', args[2] or ''
  if not is_set(flow_id) or not is_set(down) then
    return err('invalid_args', 'flow_id and downstream_eid required')
  end
  local removed = redis.call('SREM', keys[1], flow_id .. '|' .. down)
  local has_group = redis.call('EXISTS', keys[2]) == 1
  if has_group then
    redis.call('HDEL', keys[2], 'cancel_siblings_pending_flag', 'cancel_siblings_pending_members')
  end
  if removed == 0 then return ok('already_drained', '') end
  if not has_group then return ok('drained_sans_group', '') end
  return ok('drained', '')
end))

-- KEYS: pending_cancel_groups, edgegroup:<down>.
-- ARGV: flow_id, downstream_eid.
redis.register_function('ff_reconcile_sibling_cancel_group', with_keys(2, function(keys, args)
  local flow_id, down = args[1] or '', args[2] or ''
  if not is_set(flow_id) or not is_set(down) then
    return err('invalid_args', 'flow_id and downstream_eid required')
  end
  local member = flow_id .. '|' .. down
  if redis.call('SISMEMBER', keys[1], member) == 0 then
    return ok('no_op', 'not_in_set')
  end
  if redis.call('EXISTS', keys[2]) == 0 then
    redis.call('SREM', keys[1], member)
    return ok('sremmed_stale', 'missing_edgegroup')
  end
  if redis.call('HGET', keys[2], 'cancel_siblings_pending_flag') ~= 'true' then
    redis.call('SREM', keys[1], member)
    return ok('sremmed_stale', 'flag_cleared')
  end
  local listed = redis.call('HGET', keys[2], 'cancel_siblings_pending_members')
  local tag = string.match(keys[2], '(%b{})') or ''
  if is_set(listed) and tag ~= '' then
    for sib in string.gmatch(listed, '([^|]+)') do
      local phase = redis.call('HGET', 'ff:exec:' .. tag .. ':' .. sib .. ':core', 'lifecycle_phase')
      if is_set(phase) and phase ~= 'terminal' then
        return ok('no_op', 'siblings_running')
      end
    end
  end
  redis.call('HDEL', keys[2], 'cancel_siblings_pending_flag', 'cancel_siblings_pending_members')
  redis.call('SREM', keys[1], member)
  return ok('completed_drain', '')
end))

-- KEYS: exec_core, deps_meta. Read-only.
redis.register_function('ff_evaluate_flow_eligibility', with_keys(2, function(keys, args)
  local core = hash_table(keys[1])
  if next(core) == nil then return ok('not_found') end
  if core.lifecycle_phase ~= 'runnable' then return ok('not_runnable') end
  if core.ownership_state ~= 'unowned' then return ok('owned') end
  if core.terminal_outcome ~= 'none' then return ok('terminal') end
  local deps = hash_table(keys[2])
  if next(deps) == nil then return ok('eligible') end
  if (tonumber(deps.impossible_required_count or '0') or 0) > 0 then
    return ok('impossible')
  end
  if (tonumber(deps.unsatisfied_required_count or '0') or 0) > 0 then
    return ok('blocked_by_dependencies')
  end
  return ok('eligible')
end))

-- KEYS: exec_core, lane blocked:dependencies, lane eligible, deps_meta,
-- deps_unresolved. ARGV: execution_id, now_ms.
redis.register_function('ff_promote_blocked_to_eligible', with_keys(5, function(keys, args)
  local eid, now = args[1], args[2]
  if eid == nil or now == nil then
    return err('invalid_input', 'execution_id and now_ms required')
  end
  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'runnable' then return err('not_runnable') end
  if core.eligibility_state ~= 'blocked_by_dependencies' then return err('not_blocked_by_deps') end
  if core.terminal_outcome ~= 'none' then return err('terminal') end
  local unsatisfied = tonumber(redis.call('HGET', keys[4], 'unsatisfied_required_count') or '0') or 0
  local open = redis.call('SCARD', keys[5])
  if unsatisfied > 0 or open > 0 then
    return err('deps_not_satisfied', tostring(unsatisfied), tostring(open))
  end
  -- make_eligible ZREMs/ZADDs core.execution_id; use the ARGV id here.
  core.execution_id = eid
  flowx.make_eligible({core = keys[1], blocked = keys[2], eligible = keys[3]}, core, now)
  return ok()
end))

-- KEYS: exec_core, lane terminal, lane eligible, lease_history; for a
-- skipped flow member also [5] lane blocked:dependencies, [6] deps_meta,
-- [7] deps_unresolved, [8..] dep:<edge> per inbound edge.
-- ARGV: execution_id, now_ms (ignored: server TIME), [3..] edge ids
-- aligned with KEYS[8..].
redis.register_function('ff_replay_execution', function(keys, args)
  local eid = args[1]
  if eid == nil then
    return err('invalid_input', 'execution_id required')
  end
  local now = now_ms()
  local core = hash_table(keys[1])
  if next(core) == nil then return err('execution_not_found') end
  if core.lifecycle_phase ~= 'terminal' then return err('execution_not_terminal') end

  local count = tonumber(core.replay_count or '0') or 0
  local max = 10
  local raw = redis.call('GET', keyfmt.policy_of_core(keys[1]))
  if raw then
    local good, pol = pcall(cjson.decode, raw)
    if good and type(pol) == 'table' then
      max = tonumber(pol.max_replay_count) or 10
    end
  end
  if count >= max then return err('max_replays_exhausted') end

  local replays = tostring(count + 1)
  local now_s = tostring(now)
  if core.terminal_outcome == 'skipped' and is_set(core.flow_id) then
    local edges = #args - 2
    if #keys < 7 + edges then
      return err('invalid_input', 'skipped flow member replay needs KEYS 5-7 and one dep key per edge')
    end
    local open = 0
    for i = 1, edges do
      local dep_key = keys[7 + i]
      local state = redis.call('HGET', dep_key, 'state')
      if state == 'impossible' then
        redis.call('HSET', dep_key, 'state', 'unsatisfied', 'last_resolved_at', '')
        redis.call('SADD', keys[7], args[2 + i])
        open = open + 1
      elseif state == 'unsatisfied' then
        open = open + 1
      end
    end
    redis.call('HSET', keys[6],
      'unsatisfied_required_count', tostring(open),
      'impossible_required_count', '0',
      'last_dependency_update_at', now_s)
    redis.call('HSET', keys[1],
      'lifecycle_phase', 'runnable',
      'ownership_state', 'unowned',
      'eligibility_state', 'blocked_by_dependencies',
      'blocking_reason', 'waiting_for_children',
      'blocking_detail', tostring(open) .. ' dep(s) unsatisfied after replay',
      'terminal_outcome', 'none',
      'attempt_state', 'pending_replay_attempt',
      'public_state', 'waiting_children',
      'pending_replay_attempt', '1',
      'replay_count', replays,
      'completed_at', '',
      'last_transition_at', now_s,
      'last_mutation_at', now_s)
    redis.call('ZREM', keys[2], eid)
    redis.call('ZADD', keys[5], tonumber(core.created_at or '0') or 0, eid)
    history_add(keys[4],
      'event', 'replay_initiated',
      'replay_count', replays,
      'replay_type', 'skipped_flow_member',
      'ts', now_s)
    return ok(tostring(open))
  end

  redis.call('HSET', keys[1],
    'lifecycle_phase', 'runnable',
    'ownership_state', 'unowned',
    'eligibility_state', 'eligible_now',
    'blocking_reason', 'waiting_for_worker',
    'blocking_detail', '',
    'terminal_outcome', 'none',
    'attempt_state', 'pending_replay_attempt',
    'public_state', 'waiting',
    'pending_replay_attempt', '1',
    'replay_count', replays,
    'completed_at', '',
    'last_transition_at', now_s,
    'last_mutation_at', now_s)
  redis.call('ZREM', keys[2], eid)
  redis.call('ZADD', keys[3], eligible_score(core.priority, core.created_at), eid)
  history_add(keys[4],
    'event', 'replay_initiated',
    'replay_count', replays,
    'replay_type', 'normal',
    'ts', now_s)
  return ok('0')
end)

-- KEYS: flow_core, flow tags. ARGV: k1, v1, k2, v2, ...
-- Tag keys must look like "<caller>.<field>". Before the first write,
-- tag-shaped fields still stored on flow_core move to the tags hash.
redis.register_function('ff_set_flow_tags', with_keys(2, function(keys, args)
  local n = #args
  if n == 0 or n % 2 ~= 0 then
    return err('invalid_input', 'tags must be non-empty even-length key/value pairs')
  end
  if redis.call('EXISTS', keys[1]) == 0 then
    return err('flow_not_found')
  end
  local pattern = '^[a-z][a-z0-9_]*%.[^.]'
  for i = 1, n, 2 do
    if not string.find(args[i], pattern) then
      return err('invalid_tag_key', args[i])
    end
  end
  if redis.call('HGET', keys[1], 'tags_migrated') ~= '1' then
    local moved, names = {}, {}
    local flat = redis.call('HGETALL', keys[1])
    for i = 1, #flat, 2 do
      if string.find(flat[i], pattern) then
        moved[#moved + 1] = flat[i]
        moved[#moved + 1] = flat[i + 1]
        names[#names + 1] = flat[i]
      end
    end
    if #moved > 0 then
      call_chunked('HSET', keys[2], moved)
      call_chunked('HDEL', keys[1], names)
    end
    redis.call('HSET', keys[1], 'tags_migrated', '1')
  end
  call_chunked('HSET', keys[2], args)
  redis.call('HSET', keys[1], 'last_mutation_at', tostring(now_ms()))
  return ok(tostring(n / 2))
end))
