package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// inspKey splits eid for the ff_* tables; a malformed id is
// backend.ErrInvalidInput.
func inspKey(eid model.ExecutionID) (execKey, error) {
	k, err := splitExecID(eid)
	if err != nil {
		return execKey{}, fmt.Errorf("%w: execution id %q: %v", backend.ErrInvalidInput, eid, err)
	}
	return k, nil
}

func inspI64(v *int64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(*v, 10)
}

// inspCore is what InspectExecution's later reads need of the execution
// row.
type inspCore struct {
	flow       *[16]byte
	attemptIdx int
	ownership  string
}

// InspectExecution implements backend.Inspector: it reads one
// execution's row, attempts (each with its own error), lease events
// (with their release reasons and workers), frames, suspension,
// waitpoints and inbound edges.
func (d *Driver) InspectExecution(ctx context.Context, eid model.ExecutionID) (*backend.ExecutionDetail, error) {
	k, err := inspKey(eid)
	if err != nil {
		return nil, err
	}
	det := &backend.ExecutionDetail{ID: string(eid), Core: map[string]string{}}
	core, err := d.inspectCore(ctx, k, det)
	if err != nil {
		return nil, err
	}
	if det.Attempts, err = d.inspectAttempts(ctx, k, core, det); err != nil {
		return nil, err
	}
	if det.LeaseHistory, err = d.inspectLeaseHistory(ctx, k); err != nil {
		return nil, err
	}
	if err := d.inspectSuspension(ctx, k, det); err != nil {
		return nil, err
	}
	if core.flow != nil {
		if det.Flow, err = d.inspectUpstream(ctx, k, *core.flow); err != nil {
			return nil, err
		}
	}
	return det, nil
}

// inspectCore fills det's core, payload, result and policy from the
// execution row. The core's fields carry the names the Valkey core hash
// has; delay_until is only there while the execution is delayed, as
// FlowFabric clears it on Valkey once the delay ends.
func (d *Driver) inspectCore(ctx context.Context, k execKey, det *backend.ExecutionDetail) (*inspCore, error) {
	var (
		c                                       inspCore
		lane, phase, elig, public, attemptState string
		blocking, cancelReason, cancelledBy     *string
		priority                                int
		created                                 int64
		terminal, deadline                      *int64
		payload, result, policy, raw            []byte
	)
	err := d.c.Pool().QueryRow(ctx, `SELECT flow_id, lane_id, lifecycle_phase, ownership_state, eligibility_state, public_state,
       attempt_state, blocking_reason, cancellation_reason, cancelled_by, attempt_index, priority, created_at_ms,
       terminal_at_ms, deadline_at_ms, payload, result, policy, raw_fields
  FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid)).Scan(&c.flow, &lane, &phase,
		&c.ownership, &elig, &public, &attemptState, &blocking, &cancelReason, &cancelledBy, &c.attemptIdx, &priority,
		&created, &terminal, &deadline, &payload, &result, &policy, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: execution %s", backend.ErrNotFound, det.ID)
	}
	if err != nil {
		return nil, inspectErrorf("read %s: %w", det.ID, err)
	}
	inspFlatten(det.Core, raw)
	if tags, ok := det.Core["tags"]; ok {
		det.Tags = map[string]string{}
		inspFlatten(det.Tags, []byte(tags))
		delete(det.Core, "tags")
	}
	if elig != model.EligibleNotUntilTime {
		delete(det.Core, "delay_until")
	}
	for f, v := range map[string]string{"execution_id": det.ID, "lane_id": lane, "lifecycle_phase": phase,
		"ownership_state": c.ownership, "eligibility_state": elig, "public_state": public, "attempt_state": attemptState,
		"current_attempt_index": strconv.Itoa(c.attemptIdx), "priority": strconv.Itoa(priority),
		"created_at": strconv.FormatInt(created, 10), "completed_at": inspI64(terminal), "deadline_at": inspI64(deadline)} {
		det.Core[f] = v
	}
	for f, v := range map[string]*string{"blocking_reason": blocking, "cancellation_reason": cancelReason, "cancelled_by": cancelledBy} {
		if v != nil {
			det.Core[f] = *v
		}
	}
	if c.flow != nil {
		det.Core["flow_id"] = model.UUID(*c.flow).String()
	}
	det.PayloadBytes, det.ResultBytes = int64(len(payload)), int64(len(result))
	det.Payload = string(payload[:min(len(payload), backend.DetailPreviewBytes)])
	det.Result = string(result[:min(len(result), backend.DetailPreviewBytes)])
	det.Policy = string(policy)
	return &c, nil
}

// inspectAttempts reads the attempts with their frames, and det.Lease
// from the current one while it is leased. An attempt's Error is its own
// failure reason; an attempt that ended the execution failed without one
// of its own (a timeout, a deadline, a reclaim cap: their statements
// write the reason on the execution) takes the execution's.
func (d *Driver) inspectAttempts(ctx context.Context, k execKey, c *inspCore, det *backend.ExecutionDetail) ([]backend.AttemptDetail, error) {
	rows, err := d.c.Pool().Query(ctx, `SELECT attempt_index, coalesce(worker_id, ''), coalesce(worker_instance_id, ''), lease_epoch,
       lease_expires_at_ms, started_at_ms, terminal_at_ms, coalesce(outcome, ''), raw_fields
  FROM ff_attempt WHERE partition_key = $1 AND execution_id = $2 ORDER BY attempt_index`, k.part, [16]byte(k.uuid))
	if err != nil {
		return nil, inspectErrorf("attempts of %s: %w", det.ID, err)
	}
	attempts, err := pgx.CollectRows(rows, inspScanAttempt)
	if err != nil {
		return nil, inspectErrorf("attempts of %s: %w", det.ID, err)
	}
	endedFailed := det.Core["lifecycle_phase"] == model.PhaseTerminal &&
		slices.Contains([]string{model.PublicFailed, model.PublicExpired}, det.Core["public_state"])
	for i := range attempts {
		a := &attempts[i]
		if a.Error == "" && a.Index == c.attemptIdx && endedFailed {
			a.Error = det.Core["failure_reason"]
		}
		if a.Index == c.attemptIdx && c.ownership == model.OwnershipLeased {
			det.Lease = map[string]string{"worker_id": a.Fields["worker_id"], "worker_instance_id": a.Fields["worker_instance_id"],
				"lease_epoch": a.Fields["lease_epoch"], "expires_at": a.Fields["lease_expires_at"]}
		}
		if a.Frames, err = d.inspectFrames(ctx, k, a.Index); err != nil {
			return nil, inspectErrorf("frames of %s: %w", det.ID, err)
		}
	}
	if attempts == nil {
		attempts = []backend.AttemptDetail{}
	}
	return attempts, nil
}

func inspScanAttempt(r pgx.CollectableRow) (backend.AttemptDetail, error) {
	var a backend.AttemptDetail
	var worker, instance, outcome string
	var epoch int64
	var expires, started, ended *int64
	var raw []byte
	if err := r.Scan(&a.Index, &worker, &instance, &epoch, &expires, &started, &ended, &outcome, &raw); err != nil {
		return a, err
	}
	a.Fields = map[string]string{}
	inspFlatten(a.Fields, raw)
	for f, v := range map[string]string{"worker_id": worker, "worker_instance_id": instance, "lease_epoch": strconv.FormatInt(epoch, 10),
		"lease_expires_at": inspI64(expires), "started_at": inspI64(started), "ended_at": inspI64(ended), "outcome": outcome} {
		if v != "" {
			a.Fields[f] = v
		}
	}
	if a.Fields["attempt_state"] == "" {
		a.Fields["attempt_state"] = outcome
	}
	a.Error = a.Fields["failure_reason"]
	return a, nil
}

func (d *Driver) inspectFrames(ctx context.Context, k execKey, idx int) ([]backend.Frame, error) {
	rows, err := d.c.Pool().Query(ctx, `SELECT ts_ms, seq, fields FROM ff_stream_frame
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 ORDER BY ts_ms, seq LIMIT $4`,
		k.part, [16]byte(k.uuid), idx, backend.DetailFrames)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend.Frame, error) {
		var ts int64
		var seq int
		var raw []byte
		err := r.Scan(&ts, &seq, &raw)
		f := backend.Frame{ID: fmt.Sprintf("%d-%d", ts, seq), Fields: map[string]string{}}
		inspFlatten(f.Fields, raw)
		return f, err
	})
}

// sqlLeaseHistory reads an execution's last lease events, newest first,
// each with its noted reason and the attempt it concerns: the newest
// attempt started by the event's time (an acquisition and a reclaim start
// theirs at that time; an expiry is of one started before), else the
// oldest (an attempt resumed since restarted its clock).
// ff_lease_event's upstream event names are mapped to FlowFabric's Valkey
// ones: every end of a lease is a "revoked" row there, a "released" event
// with its reason on Valkey; a revoke without a noted reason (written
// before fabric noted them) takes it from the attempt ended then.
// Renewals are left out: FlowFabric's Valkey history records none.
const sqlLeaseHistory = `SELECT ev.event_id, ev.event_type, coalesce(ev.lease_id, ''), ev.occurred_at_ms,
       coalesce(n.reason, CASE WHEN ev.event_type = 'revoked' AND a.terminal_at_ms = ev.occurred_at_ms THEN CASE a.outcome
           WHEN 'success' THEN 'completed' WHEN 'retry' THEN 'failed_retry_scheduled' WHEN 'failed' THEN 'failed_terminal'
           WHEN 'cancelled' THEN 'cancelled' ELSE '' END ELSE '' END, ''),
       a.attempt_index, coalesce(a.worker_id, ''), coalesce(a.worker_instance_id, '')
  FROM ff_lease_event ev
  LEFT JOIN fabric_lease_reason n ON n.event_id = ev.event_id
  LEFT JOIN LATERAL (
    SELECT attempt_index, worker_id, worker_instance_id, terminal_at_ms, outcome,
           started_at_ms < ev.occurred_at_ms OR (started_at_ms = ev.occurred_at_ms AND ev.event_type <> 'expired') AS before
      FROM ff_attempt WHERE partition_key = $1 AND execution_id = $2
     ORDER BY before DESC, CASE WHEN started_at_ms < ev.occurred_at_ms OR (started_at_ms = ev.occurred_at_ms AND ev.event_type <> 'expired')
                                THEN -attempt_index ELSE attempt_index END
     LIMIT 1) a ON true
 WHERE ev.partition_key = $3 AND ev.execution_id = $4 AND ev.event_type <> 'renewed'
 ORDER BY ev.event_id DESC LIMIT $5`

// inspectLeaseHistory reads the last backend.DetailFrames lease events,
// oldest first.
func (d *Driver) inspectLeaseHistory(ctx context.Context, k execKey) ([]backend.Frame, error) {
	rows, err := d.c.Pool().Query(ctx, sqlLeaseHistory, k.part, [16]byte(k.uuid), int(k.part), k.uuid.String(), backend.DetailFrames)
	if err != nil {
		return nil, inspectErrorf("lease events of %s: %w", k.execID(), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend.Frame, error) {
		var id, at int64
		var typ, lease, reason, worker, instance string
		var idx *int
		if err := r.Scan(&id, &typ, &lease, &at, &reason, &idx, &worker, &instance); err != nil {
			return backend.Frame{}, err
		}
		if typ == LeaseEventRevoked && reason != "" {
			typ = "released"
		}
		f := map[string]string{"event": typ, "ts": strconv.FormatInt(at, 10)}
		for name, v := range map[string]string{"lease_id": lease, "reason": reason, "worker_id": worker,
			"worker_instance_id": instance} {
			if v != "" {
				f[name] = v
			}
		}
		if idx != nil {
			f["attempt_index"] = strconv.Itoa(*idx)
		}
		return backend.Frame{ID: strconv.FormatInt(id, 10), Fields: f}, nil
	})
	if err != nil {
		return nil, inspectErrorf("lease events of %s: %w", k.execID(), err)
	}
	slices.Reverse(out) // read newest first, shown oldest first
	if out == nil {
		out = []backend.Frame{}
	}
	return out, nil
}

// inspectSuspension fills det's current suspension and pending
// waitpoints (without their tokens).
func (d *Driver) inspectSuspension(ctx context.Context, k execKey, det *backend.ExecutionDetail) error {
	pool := d.c.Pool()
	var (
		sid     [16]byte
		at      int64
		timeout *int64
		reason  *string
		cond    []byte
	)
	err := pool.QueryRow(ctx, `SELECT suspension_id, suspended_at_ms, timeout_at_ms, reason_code, condition FROM ff_suspension_current
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid)).Scan(&sid, &at, &timeout, &reason, &cond)
	switch {
	case err == nil:
		det.Suspension = map[string]string{"suspension_id": model.UUID(sid).String(), "created_at": strconv.FormatInt(at, 10),
			"timeout_at": inspI64(timeout), "resume_condition_json": string(cond)}
		if reason != nil {
			det.Suspension["reason_code"] = *reason
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return inspectErrorf("suspension of %s: %w", det.ID, err)
	}
	rows, err := pool.Query(ctx, `SELECT waitpoint_id, created_at_ms, expires_at_ms, condition FROM ff_waitpoint_pending
 WHERE partition_key = $1 AND execution_id = $2 ORDER BY created_at_ms`, k.part, [16]byte(k.uuid))
	if err != nil {
		return inspectErrorf("waitpoints of %s: %w", det.ID, err)
	}
	det.Waitpoints, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend.WaitpointDetail, error) {
		var id [16]byte
		var at int64
		var exp *int64
		var cond []byte
		err := r.Scan(&id, &at, &exp, &cond)
		return backend.WaitpointDetail{ID: model.UUID(id).String(), Fields: map[string]string{"execution_id": det.ID,
			"created_at": strconv.FormatInt(at, 10), "expires_at": inspI64(exp), "condition": string(cond)}}, err
	})
	if err != nil {
		return inspectErrorf("waitpoints of %s: %w", det.ID, err)
	}
	if det.Waitpoints == nil {
		det.Waitpoints = []backend.WaitpointDetail{}
	}
	return nil
}

// inspectUpstream reads the edges into a flow member.
func (d *Driver) inspectUpstream(ctx context.Context, k execKey, flow [16]byte) (*backend.FlowMembership, error) {
	rows, err := d.c.Pool().Query(ctx, `SELECT ed.edge_id, ed.upstream_eid, ed.partition_key, coalesce(ed.policy->>'dependency_kind', 'success_only'),
       coalesce(up.public_state, '')
  FROM ff_edge ed LEFT JOIN ff_exec_core up ON up.partition_key = ed.partition_key AND up.execution_id = ed.upstream_eid
 WHERE ed.partition_key = $1 AND ed.flow_id = $2 AND ed.downstream_eid = $3 ORDER BY ed.edge_id`, k.part, flow, [16]byte(k.uuid))
	if err != nil {
		return nil, inspectErrorf("edges of %s: %w", k.execID(), err)
	}
	m := &backend.FlowMembership{FlowID: model.UUID(flow).String()}
	m.Upstream, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (map[string]string, error) {
		var edge, up [16]byte
		var p int16
		var kind, st string
		err := r.Scan(&edge, &up, &p, &kind, &st)
		return map[string]string{"edge_id": model.UUID(edge).String(), "upstream_execution_id": inspExecID(p, up),
			"dependency_kind": kind, "state": st}, err
	})
	if err != nil {
		return nil, inspectErrorf("edges of %s: %w", k.execID(), err)
	}
	if m.Upstream == nil {
		m.Upstream = []map[string]string{}
	}
	return m, nil
}
