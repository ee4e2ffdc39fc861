package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/model"
)

// PGConsole is the console over a Postgres deployment: the same API as
// Console, read from the ff_* tables. Its operator writes (cancel,
// replay, priority change, signal delivery) go through the Postgres
// client; lane pause answers ErrUnsupported as on Valkey, and so does the
// replay of a flow member that was skipped or has downstream members.
type PGConsole struct {
	c   *postgres.Client
	now func() time.Time
}

// NewPGConsole returns a console over c.
func NewPGConsole(c *postgres.Client) *PGConsole { return &PGConsole{c: c, now: time.Now} }

// pgStateFilter is the WHERE clause of ListQuery.State on ff_exec_core.
func pgStateFilter(state string) (string, error) {
	switch state {
	case "":
		return "true", nil
	case "eligible":
		return "lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now'", nil
	case "delayed":
		return "lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time'", nil
	case "active", "suspended", "terminal":
		return "lifecycle_phase = '" + state + "'", nil
	case "blocked":
		return "lifecycle_phase = 'runnable' AND eligibility_state LIKE 'blocked_by_%'", nil
	case "blocked:dependencies", "blocked:budget", "blocked:quota", "blocked:route", "blocked:operator":
		return "lifecycle_phase = 'runnable' AND eligibility_state = 'blocked_by_" + strings.TrimPrefix(state, "blocked:") + "'", nil
	case model.PublicCompleted, model.PublicFailed, model.PublicCancelled, model.PublicExpired, model.PublicSkipped:
		return "lifecycle_phase = 'terminal' AND public_state = '" + state + "'", nil
	}
	return "", fmt.Errorf("%w: unknown state %q (one of %s)", ErrBadRequest, state, strings.Join(ListStates(), ", "))
}

func (pc *PGConsole) laneNames(ctx context.Context) ([]string, error) {
	rows, err := pc.c.Pool().Query(ctx, `SELECT lane_id FROM ff_lane_registry UNION SELECT DISTINCT lane_id FROM ff_exec_core ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("console: read lanes: %w", err)
	}
	lanes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("console: read lanes: %w", err)
	}
	return lanes, nil
}

const pgRowCols = `partition_key, execution_id, lane_id, public_state, lifecycle_phase, coalesce(raw_fields->>'execution_kind', ''),
       priority, coalesce((raw_fields->>'total_attempt_count')::int, attempt_index), created_at_ms, flow_id, coalesce(blocking_reason, '')`

func pgExecID(part int16, u [16]byte) string {
	return string(model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(part)}, model.UUID(u)))
}

func scanPGRow(r pgx.CollectableRow) (ExecutionRow, error) {
	var e ExecutionRow
	var part int16
	var id [16]byte
	var flow *[16]byte
	err := r.Scan(&part, &id, &e.Lane, &e.State, &e.Phase, &e.Kind, &e.Priority, &e.Attempts, &e.CreatedAt, &flow, &e.Detail)
	e.ID = pgExecID(part, id)
	if flow != nil {
		e.FlowID = model.UUID(*flow).String()
	}
	return e, err
}

// ListExecutions lists executions oldest first (created_at, id).
func (pc *PGConsole) ListExecutions(ctx context.Context, q ListQuery) (*ExecutionPage, error) {
	off, err := q.normalize()
	if err != nil {
		return nil, err
	}
	where, err := pgStateFilter(q.State)
	if err != nil {
		return nil, err
	}
	args := []any{}
	if q.Lane != "" {
		lanes, err := pc.laneNames(ctx)
		if err != nil {
			return nil, err
		}
		if err := (&Console{}).checkLane(lanes, q.Lane); err != nil {
			return nil, err
		}
		args = append(args, q.Lane)
		where += fmt.Sprintf(" AND lane_id = $%d", len(args))
	}
	if q.Flow != "" {
		f, err := pc.flowCore(ctx, q.Flow)
		if err != nil {
			return nil, err
		}
		args = append(args, f.part, [16]byte(f.id))
		where += fmt.Sprintf(" AND partition_key = $%d AND flow_id = $%d", len(args)-1, len(args))
	}
	args = append(args, q.Limit+1, off)
	order := "created_at_ms, partition_key, execution_id"
	if q.Desc {
		order = "created_at_ms DESC, partition_key DESC, execution_id DESC"
	}
	rows, err := pc.c.Pool().Query(ctx, `SELECT `+pgRowCols+` FROM ff_exec_core WHERE `+where+
		fmt.Sprintf(` ORDER BY %s LIMIT $%d OFFSET $%d`, order, len(args)-1, len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("console: list executions: %w", err)
	}
	list, err := pgx.CollectRows(rows, scanPGRow)
	if err != nil {
		return nil, fmt.Errorf("console: list executions: %w", err)
	}
	page := &ExecutionPage{Executions: list}
	if len(list) > q.Limit {
		page.Executions = list[:q.Limit]
		page.NextCursor = strconv.FormatInt(off+int64(q.Limit), 10)
	}
	if page.Executions == nil {
		page.Executions = []ExecutionRow{}
	}
	return page, nil
}

// flatten turns a jsonb object into string fields (non-strings as JSON).
func flatten(dst map[string]string, raw []byte) {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	for k, v := range m {
		if s, ok := v.(string); ok {
			dst[k] = s
			continue
		}
		b, _ := json.Marshal(v)
		dst[k] = string(b)
	}
}

func pgKey(id string) (int16, [16]byte, model.ExecutionID, error) {
	eid, err := ParseID(id)
	if err != nil {
		return 0, [16]byte{}, "", err
	}
	u, err := model.ParseUUID(eid.UUIDString())
	if err != nil {
		return 0, [16]byte{}, "", fmt.Errorf("%w: execution id %q: %v", ErrBadRequest, id, err)
	}
	return int16(eid.Partition().Index), [16]byte(u), eid, nil
}

func i64s(v *int64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(*v, 10)
}

// Execution reads one execution's row, attempts, lease events, frames,
// suspension, waitpoints and inbound edges.
func (pc *PGConsole) Execution(ctx context.Context, id string) (*ExecutionDetail, error) {
	part, u, eid, err := pgKey(id)
	if err != nil {
		return nil, err
	}
	pool := pc.c.Pool()
	d := &ExecutionDetail{ID: string(eid), Core: map[string]string{}, LeaseHistory: []Frame{}, Attempts: []Attempt{}, Waitpoints: []Waitpoint{}}
	var (
		flow                                         *[16]byte
		lane, phase, own, elig, public, attemptState string
		blocking, cancelReason, cancelledBy          *string
		attemptIdx, priority                         int
		created                                      int64
		terminal, deadline                           *int64
		payload, result                              []byte
		policy, raw                                  []byte
	)
	err = pool.QueryRow(ctx, `SELECT flow_id, lane_id, lifecycle_phase, ownership_state, eligibility_state, public_state,
       attempt_state, blocking_reason, cancellation_reason, cancelled_by, attempt_index, priority, created_at_ms,
       terminal_at_ms, deadline_at_ms, payload, result, policy, raw_fields
  FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`, part, u).Scan(&flow, &lane, &phase, &own, &elig,
		&public, &attemptState, &blocking, &cancelReason, &cancelledBy, &attemptIdx, &priority, &created, &terminal,
		&deadline, &payload, &result, &policy, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: execution %s", ErrNotFound, eid)
	}
	if err != nil {
		return nil, fmt.Errorf("console: read %s: %w", eid, err)
	}
	flatten(d.Core, raw)
	if tags, ok := d.Core["tags"]; ok {
		d.Tags = map[string]string{}
		flatten(d.Tags, []byte(tags))
		delete(d.Core, "tags")
	}
	for k, v := range map[string]string{"execution_id": string(eid), "lane_id": lane, "lifecycle_phase": phase,
		"ownership_state": own, "eligibility_state": elig, "public_state": public, "attempt_state": attemptState,
		"current_attempt_index": strconv.Itoa(attemptIdx), "priority": strconv.Itoa(priority),
		"created_at": strconv.FormatInt(created, 10), "completed_at": i64s(terminal), "deadline_at": i64s(deadline)} {
		d.Core[k] = v
	}
	for k, v := range map[string]*string{"blocking_reason": blocking, "cancellation_reason": cancelReason, "cancelled_by": cancelledBy} {
		if v != nil {
			d.Core[k] = *v
		}
	}
	if flow != nil {
		d.Core["flow_id"] = model.UUID(*flow).String()
	}
	d.PayloadBytes, d.ResultBytes = int64(len(payload)), int64(len(result))
	d.Payload, d.Result = string(payload[:min(len(payload), PreviewBytes)]), string(result[:min(len(result), PreviewBytes)])
	d.Policy = string(policy)

	rows, err := pool.Query(ctx, `SELECT attempt_index, coalesce(worker_id, ''), coalesce(worker_instance_id, ''), lease_epoch,
       lease_expires_at_ms, started_at_ms, terminal_at_ms, coalesce(outcome, ''), raw_fields
  FROM ff_attempt WHERE partition_key = $1 AND execution_id = $2 ORDER BY attempt_index`, part, u)
	if err != nil {
		return nil, fmt.Errorf("console: attempts of %s: %w", eid, err)
	}
	d.Attempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var worker, instance, outcome string
		var epoch int64
		var expires, started, ended *int64
		var raw []byte
		if err := r.Scan(&a.Index, &worker, &instance, &epoch, &expires, &started, &ended, &outcome, &raw); err != nil {
			return a, err
		}
		a.Fields = map[string]string{}
		flatten(a.Fields, raw)
		for k, v := range map[string]string{"worker_id": worker, "worker_instance_id": instance, "lease_epoch": strconv.FormatInt(epoch, 10),
			"lease_expires_at": i64s(expires), "started_at": i64s(started), "ended_at": i64s(ended), "outcome": outcome} {
			if v != "" {
				a.Fields[k] = v
			}
		}
		if a.Fields["attempt_state"] == "" {
			a.Fields["attempt_state"] = outcome
		}
		a.Error = a.Fields["failure_reason"]
		if a.Error == "" && a.Index == attemptIdx {
			a.Error = d.Core["failure_reason"]
		}
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("console: attempts of %s: %w", eid, err)
	}
	for i := range d.Attempts {
		a := &d.Attempts[i]
		if a.Index == attemptIdx && own == model.OwnershipLeased {
			d.Lease = map[string]string{"worker_id": a.Fields["worker_id"], "worker_instance_id": a.Fields["worker_instance_id"],
				"lease_epoch": a.Fields["lease_epoch"], "expires_at": a.Fields["lease_expires_at"]}
		}
		fr, err := pool.Query(ctx, `SELECT ts_ms, seq, fields FROM ff_stream_frame
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 ORDER BY ts_ms, seq LIMIT $4`, part, u, a.Index, detailFrames)
		if err != nil {
			return nil, fmt.Errorf("console: frames of %s: %w", eid, err)
		}
		a.Frames, err = pgx.CollectRows(fr, func(r pgx.CollectableRow) (Frame, error) {
			var ts int64
			var seq int
			var raw []byte
			err := r.Scan(&ts, &seq, &raw)
			f := Frame{ID: fmt.Sprintf("%d-%d", ts, seq), Fields: map[string]string{}}
			flatten(f.Fields, raw)
			return f, err
		})
		if err != nil {
			return nil, fmt.Errorf("console: frames of %s: %w", eid, err)
		}
	}

	rows, err = pool.Query(ctx, `SELECT event_id, event_type, coalesce(lease_id, ''), occurred_at_ms FROM ff_lease_event
 WHERE partition_key = $1 AND execution_id = $2 ORDER BY event_id DESC LIMIT $3`, int(part), model.UUID(u).String(), detailFrames)
	if err != nil {
		return nil, fmt.Errorf("console: lease events of %s: %w", eid, err)
	}
	d.LeaseHistory, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Frame, error) {
		var id, at int64
		var typ, lease string
		err := r.Scan(&id, &typ, &lease, &at)
		return Frame{ID: strconv.FormatInt(id, 10), Fields: map[string]string{"event": typ, "lease_id": lease, "ts": strconv.FormatInt(at, 10)}}, err
	})
	if err != nil {
		return nil, fmt.Errorf("console: lease events of %s: %w", eid, err)
	}
	slices.Reverse(d.LeaseHistory) // read newest first, shown oldest first

	var sus struct {
		id      [16]byte
		at      int64
		timeout *int64
		reason  *string
		cond    []byte
	}
	err = pool.QueryRow(ctx, `SELECT suspension_id, suspended_at_ms, timeout_at_ms, reason_code, condition FROM ff_suspension_current
 WHERE partition_key = $1 AND execution_id = $2`, part, u).Scan(&sus.id, &sus.at, &sus.timeout, &sus.reason, &sus.cond)
	switch {
	case err == nil:
		d.Suspension = map[string]string{"suspension_id": model.UUID(sus.id).String(), "created_at": strconv.FormatInt(sus.at, 10),
			"timeout_at": i64s(sus.timeout), "resume_condition_json": string(sus.cond)}
		if sus.reason != nil {
			d.Suspension["reason_code"] = *sus.reason
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("console: suspension of %s: %w", eid, err)
	}
	rows, err = pool.Query(ctx, `SELECT waitpoint_id, created_at_ms, expires_at_ms, condition FROM ff_waitpoint_pending
 WHERE partition_key = $1 AND execution_id = $2 ORDER BY created_at_ms`, part, u)
	if err != nil {
		return nil, fmt.Errorf("console: waitpoints of %s: %w", eid, err)
	}
	d.Waitpoints, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Waitpoint, error) {
		var id [16]byte
		var at int64
		var exp *int64
		var cond []byte
		err := r.Scan(&id, &at, &exp, &cond)
		return Waitpoint{ID: model.UUID(id).String(), Fields: map[string]string{"execution_id": string(eid),
			"created_at": strconv.FormatInt(at, 10), "expires_at": i64s(exp), "condition": string(cond)}}, err
	})
	if err != nil {
		return nil, fmt.Errorf("console: waitpoints of %s: %w", eid, err)
	}
	if flow != nil {
		m := &FlowMembership{FlowID: model.UUID(*flow).String(), Upstream: []map[string]string{}}
		rows, err = pool.Query(ctx, `SELECT ed.edge_id, ed.upstream_eid, ed.partition_key, coalesce(ed.policy->>'dependency_kind', 'success_only'),
       coalesce(up.public_state, '')
  FROM ff_edge ed LEFT JOIN ff_exec_core up ON up.partition_key = ed.partition_key AND up.execution_id = ed.upstream_eid
 WHERE ed.partition_key = $1 AND ed.flow_id = $2 AND ed.downstream_eid = $3 ORDER BY ed.edge_id`, part, *flow, u)
		if err != nil {
			return nil, fmt.Errorf("console: edges of %s: %w", eid, err)
		}
		m.Upstream, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (map[string]string, error) {
			var edge, up [16]byte
			var p int16
			var kind, st string
			err := r.Scan(&edge, &up, &p, &kind, &st)
			return map[string]string{"edge_id": model.UUID(edge).String(), "upstream_execution_id": pgExecID(p, up),
				"dependency_kind": kind, "state": st}, err
		})
		if err != nil {
			return nil, fmt.Errorf("console: edges of %s: %w", eid, err)
		}
		d.Flow = m
	}
	return d, nil
}

type pgFlowRef struct {
	id   model.UUID
	part int16
	core map[string]string
}

func (pc *PGConsole) flowCore(ctx context.Context, id string) (*pgFlowRef, error) {
	u, err := model.ParseUUID(id)
	if err != nil {
		return nil, fmt.Errorf("%w: flow id %q: %v", ErrBadRequest, id, err)
	}
	part := int16(pc.c.Partitions().FlowPartition(u).Index)
	var state string
	var created int64
	var rev int64
	var raw []byte
	err = pc.c.Pool().QueryRow(ctx, `SELECT public_flow_state, created_at_ms, graph_revision, raw_fields FROM ff_flow_core
 WHERE partition_key = $1 AND flow_id = $2`, part, [16]byte(u)).Scan(&state, &created, &rev, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: flow %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("console: read flow %s: %w", id, err)
	}
	core := map[string]string{}
	flatten(core, raw)
	core["flow_id"], core["public_flow_state"] = u.String(), state
	core["created_at"], core["graph_revision"] = strconv.FormatInt(created, 10), strconv.FormatInt(rev, 10)
	return &pgFlowRef{id: u, part: part, core: core}, nil
}

// Flow reads a flow's members and edges.
func (pc *PGConsole) Flow(ctx context.Context, id string) (*FlowView, error) {
	f, err := pc.flowCore(ctx, id)
	if err != nil {
		return nil, err
	}
	pool := pc.c.Pool()
	rows, err := pool.Query(ctx, `SELECT `+pgRowCols+` FROM ff_exec_core WHERE partition_key = $1 AND flow_id = $2
 ORDER BY execution_id`, f.part, [16]byte(f.id))
	if err != nil {
		return nil, fmt.Errorf("console: flow members: %w", err)
	}
	v := &FlowView{ID: f.id.String(), Core: f.core, Edges: []FlowEdge{}, States: map[string]int{}}
	if v.Nodes, err = pgx.CollectRows(rows, scanPGRow); err != nil {
		return nil, fmt.Errorf("console: flow members: %w", err)
	}
	if v.Nodes == nil {
		v.Nodes = []ExecutionRow{}
	}
	for _, n := range v.Nodes {
		v.States[n.State]++
	}
	rows, err = pool.Query(ctx, `SELECT e.edge_id, e.upstream_eid, e.downstream_eid, coalesce(e.policy->>'dependency_kind', 'success_only'),
       coalesce(e.policy->>'edge_state', ''),
       CASE coalesce((SELECT ce.outcome FROM ff_completion_event ce
                       WHERE ce.partition_key = e.partition_key AND ce.execution_id = e.upstream_eid AND ce.dispatched_at_ms IS NOT NULL
                       ORDER BY ce.event_id DESC LIMIT 1), '')
         WHEN 'success' THEN 'satisfied' WHEN '' THEN 'unsatisfied' ELSE 'impossible' END
  FROM ff_edge e WHERE e.partition_key = $1 AND e.flow_id = $2 ORDER BY e.edge_id`, f.part, [16]byte(f.id))
	if err != nil {
		return nil, fmt.Errorf("console: flow edges: %w", err)
	}
	edges, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FlowEdge, error) {
		var e, up, down [16]byte
		var fe FlowEdge
		err := r.Scan(&e, &up, &down, &fe.Kind, &fe.State, &fe.Resolution)
		fe.ID, fe.Upstream, fe.Downstream = model.UUID(e).String(), pgExecID(f.part, up), pgExecID(f.part, down)
		return fe, err
	})
	if err != nil {
		return nil, fmt.Errorf("console: flow edges: %w", err)
	}
	v.Edges = append(v.Edges, edges...)
	err = pool.QueryRow(ctx, `SELECT public_flow_state FROM ff_flow_summary WHERE partition_key = $1 AND flow_id = $2`,
		f.part, [16]byte(f.id)).Scan(&v.SummaryState)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("console: flow summary: %w", err)
	}
	return v, nil
}

// pgIndexOf names the lane index (Valkey's name) a row's state belongs in.
func pgIndexOf(phase, elig string) string {
	switch phase {
	case model.PhaseActive, model.PhaseSuspended, model.PhaseTerminal:
		return phase
	}
	switch {
	case elig == model.EligibleNotUntilTime:
		return "delayed"
	case strings.HasPrefix(elig, "blocked_by_"):
		r := strings.TrimPrefix(elig, "blocked_by_")
		if r == "dependencies" || r == "budget" || r == "quota" || r == "route" {
			return "blocked:" + r
		}
		return "blocked:operator"
	}
	return "eligible"
}

// pgLaneCensus reads, in one statement, every lane (the registry's and
// those executions name) with its executions counted by lifecycle phase
// and eligibility, the earliest wake time of its delayed ones, and the
// server clock (a row of its own, lane NULL). One reference to ff_exec_core, not three: planning a
// statement over its 256 partitions is most of its cost on a connection
// that has not yet read their catalog entries (~200-700 ms each on a
// loaded 2-core machine, against ~10 ms to run it over a few thousand
// rows), and pgx prepares it once per connection, so a warm connection
// neither plans nor reads the catalog again (0.1 ms planning, ~6 ms run).
// The earliest wake time of all delayed executions is the oldest due
// one's when any is due (a due one wakes before any not yet due), so
// pg_delayed_promoter's lag needs no clock in the scan. Every number is
// exact, read in the statement's one snapshot.
const pgLaneCensus = `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, lane_id, lifecycle_phase, eligibility_state, count(*),
       coalesce(min(deadline_at_ms) FILTER (WHERE lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time'), 0)
  FROM ff_exec_core GROUP BY 2, 3, 4
UNION ALL
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, lane_id, '', '', 0, 0 FROM ff_lane_registry
UNION ALL
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, '', '', 0, 0`

// laneCensus is pgLaneCensus's reading: the lanes by name with their
// counts (Lanes), the server clock and the earliest wake time of a
// delayed execution (ms; 0: none is delayed).
func (pc *PGConsole) laneCensus(ctx context.Context) (lanes []LaneCounts, nowMs, earliestDelayed int64, err error) {
	rows, err := pc.c.Pool().Query(ctx, pgLaneCensus)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("console: lane counts: %w", err)
	}
	defer rows.Close()
	at := map[string]int{}
	for rows.Next() {
		var lane *string // NULL: the clock's own row, there on an empty database
		var phase, elig string
		var now, n, due int64
		if err := rows.Scan(&now, &lane, &phase, &elig, &n, &due); err != nil {
			return nil, 0, 0, fmt.Errorf("console: lane counts: %w", err)
		}
		nowMs = max(nowMs, now)
		if lane == nil {
			continue
		}
		if due > 0 && (earliestDelayed == 0 || due < earliestDelayed) {
			earliestDelayed = due
		}
		i, ok := at[*lane]
		if !ok {
			i = len(lanes)
			at[*lane] = i
			lanes = append(lanes, LaneCounts{Lane: *lane, Counts: map[string]int64{}, State: "active"})
			for _, name := range model.LaneIndexNames {
				lanes[i].Counts[name] = 0
			}
		}
		if phase != "" {
			lanes[i].Counts[pgIndexOf(phase, elig)] += n
			lanes[i].Total += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("console: lane counts: %w", err)
	}
	slices.SortFunc(lanes, func(a, b LaneCounts) int { return strings.Compare(a.Lane, b.Lane) })
	if lanes == nil {
		lanes = []LaneCounts{}
	}
	return lanes, nowMs, earliestDelayed, nil
}

// Lanes counts each lane's executions per state (laneCensus).
func (pc *PGConsole) Lanes(ctx context.Context) ([]LaneCounts, error) {
	lanes, _, _, err := pc.laneCensus(ctx)
	return lanes, err
}

// Workers lists the registered workers of ns with the leases they hold.
func (pc *PGConsole) Workers(ctx context.Context, ns string) ([]WorkerInfo, error) {
	ws, err := pc.c.ListWorkers(ctx, ns, "", 0)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	rows, err := pc.c.Pool().Query(ctx, `SELECT a.worker_instance_id, count(*) FROM ff_exec_core e
  JOIN ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id AND a.attempt_index = e.attempt_index
 WHERE e.ownership_state = 'leased' AND a.worker_instance_id IS NOT NULL GROUP BY 1`)
	if err != nil {
		return nil, fmt.Errorf("console: leases held: %w", err)
	}
	held := map[string]int64{}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("console: leases held: %w", err)
		}
		held[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("console: leases held: %w", err)
	}
	now := pc.now().UnixMilli()
	out := make([]WorkerInfo, 0, len(ws))
	for _, w := range ws {
		lanes, caps := w.Lanes, w.Capabilities
		if lanes == nil {
			lanes = []string{}
		}
		if caps == nil {
			caps = []string{}
		}
		out = append(out, WorkerInfo{InstanceID: w.InstanceID, WorkerID: w.WorkerID, Alive: w.LastHeartbeatMs+w.TTLMs > now,
			Lanes: lanes, Capabilities: caps, LastHeartbeatMs: w.LastHeartbeatMs, RegisteredAtMs: w.RegisteredAtMs,
			TTLMs: w.TTLMs, Leases: held[w.InstanceID]})
	}
	return out, nil
}

// pgConflict turns a logical error of the Postgres backend into the
// console's errors: an unknown execution ErrNotFound, a refusal by the
// execution's state ErrConflict (409 with its code, as on Valkey).
func pgConflict(action string, eid model.ExecutionID, err error) error {
	var code postgres.ErrorCode
	switch {
	case errors.Is(err, postgres.CodeExecutionNotFound):
		return fmt.Errorf("%w: execution %s", ErrNotFound, eid)
	case errors.As(err, &code):
		return fmt.Errorf("%w: %s refused: %s (%v)", ErrConflict, action, code, err)
	}
	return fmt.Errorf("console: %s: %w", action, err)
}

// Cancel cancels an execution as an operator (cancelled_by
// operator_override), leased or not; the detail names the phase it was
// cancelled from. A terminal execution is ErrConflict.
func (pc *PGConsole) Cancel(ctx context.Context, id, reason string) (*ActionResult, error) {
	_, _, eid, err := pgKey(id)
	if err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "operator_cancel"
	}
	from, err := pc.c.CancelExecution(ctx, &postgres.CancelExecutionParams{ExecutionID: eid, Reason: reason,
		Source: "operator_override"})
	if err != nil {
		return nil, pgConflict("cancel", eid, err)
	}
	return &ActionResult{ID: string(eid), Action: "cancel", Detail: map[string]any{"from": from, "reason": reason}}, nil
}

// Replay re-runs an ended execution (the Postgres backend's replay: back
// to waiting, its replay count up one). A flow member that was skipped or
// has downstream members is refused with ErrUnsupported (see
// postgres.Client.ReplayExecution); one not ended is ErrConflict.
func (pc *PGConsole) Replay(ctx context.Context, id string) (*ActionResult, error) {
	_, _, eid, err := pgKey(id)
	if err != nil {
		return nil, err
	}
	r, err := pc.c.ReplayExecution(ctx, eid)
	if errors.Is(err, postgres.CodeInvalidInput) {
		return nil, fmt.Errorf("%w: replay on the Postgres backend: %v", ErrUnsupported, err)
	}
	if err != nil {
		return nil, pgConflict("replay", eid, err)
	}
	return &ActionResult{ID: string(eid), Action: "replay", Detail: map[string]any{"replay_count": r.ReplayCount,
		"public_state": r.PublicState}}, nil
}

// Priority changes an eligible execution's priority (0..9000); one not
// runnable and eligible now is ErrConflict.
func (pc *PGConsole) Priority(ctx context.Context, id string, priority int) (*ActionResult, error) {
	if priority < 0 || priority > model.PriorityMax {
		return nil, fmt.Errorf("%w: priority must be 0..%d, got %d", ErrBadRequest, model.PriorityMax, priority)
	}
	_, _, eid, err := pgKey(id)
	if err != nil {
		return nil, err
	}
	r, err := pc.c.ChangePriority(ctx, eid, priority)
	if err != nil {
		return nil, pgConflict("priority", eid, err)
	}
	return &ActionResult{ID: string(eid), Action: "priority", Detail: map[string]any{"old": r.Old, "new": r.New}}, nil
}

// Signal delivers a signal to an execution's waitpoint (its current one
// unless the request names another). As on Valkey the console reads the
// waitpoint's token itself: the operator needs the admin token, not the
// waitpoint's.
func (pc *PGConsole) Signal(ctx context.Context, id string, s SignalRequest) (*ActionResult, error) {
	if s.Name == "" {
		return nil, fmt.Errorf("%w: a signal needs a name", ErrBadRequest)
	}
	part, u, eid, err := pgKey(id)
	if err != nil {
		return nil, err
	}
	var phase string
	var current *string
	err = pc.c.Pool().QueryRow(ctx, `SELECT lifecycle_phase, raw_fields->>'current_waitpoint_id' FROM ff_exec_core
 WHERE partition_key = $1 AND execution_id = $2`, part, u).Scan(&phase, &current)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: execution %s", ErrNotFound, eid)
	}
	if err != nil {
		return nil, fmt.Errorf("console: read %s: %w", eid, err)
	}
	wp := s.WaitpointID
	if wp == "" {
		// current_waitpoint_id outlives the suspension (its waitpoint is
		// closed on resume): only a suspended execution has one to signal.
		if phase != model.PhaseSuspended || current == nil || *current == "" {
			return nil, fmt.Errorf("%w: signal refused: execution %s has no current waitpoint (not suspended; phase %s)", ErrConflict, eid, phase)
		}
		wp = *current
	}
	wu, err := model.ParseUUID(wp)
	if err != nil {
		return nil, fmt.Errorf("%w: waitpoint id %q: %v", ErrBadRequest, wp, err)
	}
	var token string
	err = pc.c.Pool().QueryRow(ctx, `SELECT token FROM ff_waitpoint_pending
 WHERE partition_key = $1 AND waitpoint_id = $2 AND execution_id = $3`, part, [16]byte(wu), u).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: waitpoint %s of %s", ErrNotFound, wp, eid)
	}
	if err != nil {
		return nil, fmt.Errorf("console: read waitpoint %s of %s: %w", wp, eid, err)
	}
	var payload []byte // none: NULL, read back as a nil Payload
	if s.Payload != "" {
		payload = []byte(s.Payload)
	}
	r, err := pc.c.DeliverSignal(ctx, &postgres.DeliverSignalParams{ExecutionID: eid, WaitpointID: wp, Token: token,
		SignalID: model.NewUUID().String(), Name: s.Name, Payload: payload, Source: "fabric-admin",
		IdempotencyKey: s.IdempotencyKey})
	if err != nil {
		return nil, pgConflict("signal", eid, err)
	}
	return &ActionResult{ID: string(eid), Action: "signal", Detail: map[string]any{"signal_id": r.SignalID,
		"effect": r.Effect, "duplicate": r.Duplicate, "waitpoint_id": wp}}, nil
}

// SetLaneState checks the lane and refuses, as on Valkey.
func (pc *PGConsole) SetLaneState(ctx context.Context, lane, state string) error {
	lanes, err := pc.laneNames(ctx)
	if err != nil {
		return err
	}
	if err := (&Console{}).checkLane(lanes, lane); err != nil {
		return err
	}
	return fmt.Errorf("%w: lane %s cannot be %s: FlowFabric keeps no lane state, so a pause would not stop its workers", ErrUnsupported, lane, state)
}
