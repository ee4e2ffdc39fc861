package postgres

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
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// pgStateFilter is the WHERE clause of ListQuery.State on ff_exec_core.
func inspStateFilter(state string) (string, error) {
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
	return "", fmt.Errorf("%w: unknown state %q (one of %s)", backend.ErrInvalidInput, state, strings.Join(backend.ListStates(), ", "))
}

func (d *Driver) laneNames(ctx context.Context) ([]string, error) {
	rows, err := d.c.Pool().Query(ctx, `SELECT lane_id FROM ff_lane_registry UNION SELECT DISTINCT lane_id FROM ff_exec_core ORDER BY 1`)
	if err != nil {
		return nil, inspectErrorf("read lanes: %w", err)
	}
	lanes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, inspectErrorf("read lanes: %w", err)
	}
	return lanes, nil
}

const inspRowCols = `partition_key, execution_id, lane_id, public_state, lifecycle_phase, coalesce(raw_fields->>'execution_kind', ''),
       priority, coalesce((raw_fields->>'total_attempt_count')::int, attempt_index), created_at_ms, flow_id, coalesce(blocking_reason, '')`

func inspExecID(part int16, u [16]byte) string {
	return string(model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(part)}, model.UUID(u)))
}

func inspScanRow(r pgx.CollectableRow) (backend.ExecutionRow, error) {
	var e backend.ExecutionRow
	var part int16
	var id [16]byte
	var flow *[16]byte
	err := r.Scan(&part, &id, &e.Lane, &e.State, &e.Phase, &e.Kind, &e.Priority, &e.Attempts, &e.CreatedAt, &flow, &e.Detail)
	e.ID = inspExecID(part, id)
	if flow != nil {
		e.FlowID = model.UUID(*flow).String()
	}
	return e, err
}

// ListExecutions implements backend.Inspector: it lists executions oldest first (created_at, id).
func (d *Driver) ListExecutions(ctx context.Context, p *backend.ListExecutionsParams) (*backend.ExecutionPage, error) {
	q := *p
	off, err := q.Page()
	if err != nil {
		return nil, err
	}
	where, err := inspStateFilter(q.State)
	if err != nil {
		return nil, err
	}
	args := []any{}
	if q.Lane != "" {
		lanes, err := d.laneNames(ctx)
		if err != nil {
			return nil, err
		}
		if err := inspCheckLane(lanes, q.Lane); err != nil {
			return nil, err
		}
		args = append(args, q.Lane)
		where += fmt.Sprintf(" AND lane_id = $%d", len(args))
	}
	if q.Flow != "" {
		f, err := d.flowCore(ctx, q.Flow)
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
	rows, err := d.c.Pool().Query(ctx, `SELECT `+inspRowCols+` FROM ff_exec_core WHERE `+where+
		fmt.Sprintf(` ORDER BY %s LIMIT $%d OFFSET $%d`, order, len(args)-1, len(args)), args...)
	if err != nil {
		return nil, inspectErrorf("list executions: %w", err)
	}
	list, err := pgx.CollectRows(rows, inspScanRow)
	if err != nil {
		return nil, inspectErrorf("list executions: %w", err)
	}
	page := &backend.ExecutionPage{Executions: list}
	if len(list) > q.Limit {
		page.Executions = list[:q.Limit]
		page.NextCursor = strconv.FormatInt(off+int64(q.Limit), 10)
	}
	if page.Executions == nil {
		page.Executions = []backend.ExecutionRow{}
	}
	return page, nil
}

// flatten turns a jsonb object into string fields (non-strings as JSON).
func inspFlatten(dst map[string]string, raw []byte) {
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

type inspFlowRef struct {
	id   model.UUID
	part int16
	core map[string]string
}

func (d *Driver) flowCore(ctx context.Context, id string) (*inspFlowRef, error) {
	u, err := model.ParseUUID(id)
	if err != nil {
		return nil, fmt.Errorf("%w: flow id %q: %v", backend.ErrInvalidInput, id, err)
	}
	part := int16(d.c.Partitions().FlowPartition(u).Index)
	var state string
	var created int64
	var rev int64
	var raw []byte
	err = d.c.Pool().QueryRow(ctx, `SELECT public_flow_state, created_at_ms, graph_revision, raw_fields FROM ff_flow_core
 WHERE partition_key = $1 AND flow_id = $2`, part, [16]byte(u)).Scan(&state, &created, &rev, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: flow %s", backend.ErrNotFound, id)
	}
	if err != nil {
		return nil, inspectErrorf("read flow %s: %w", id, err)
	}
	core := map[string]string{}
	inspFlatten(core, raw)
	core["flow_id"], core["public_flow_state"] = u.String(), state
	core["created_at"], core["graph_revision"] = strconv.FormatInt(created, 10), strconv.FormatInt(rev, 10)
	return &inspFlowRef{id: u, part: part, core: core}, nil
}

// InspectFlow implements backend.Inspector: it reads a flow's members and edges.
func (d *Driver) InspectFlow(ctx context.Context, id model.UUID) (*backend.FlowView, error) {
	f, err := d.flowCore(ctx, id.String())
	if err != nil {
		return nil, err
	}
	pool := d.c.Pool()
	rows, err := pool.Query(ctx, `SELECT `+inspRowCols+` FROM ff_exec_core WHERE partition_key = $1 AND flow_id = $2
 ORDER BY execution_id`, f.part, [16]byte(f.id))
	if err != nil {
		return nil, inspectErrorf("flow members: %w", err)
	}
	v := &backend.FlowView{ID: f.id.String(), Core: f.core, Edges: []backend.FlowEdge{}, States: map[string]int{}}
	if v.Nodes, err = pgx.CollectRows(rows, inspScanRow); err != nil {
		return nil, inspectErrorf("flow members: %w", err)
	}
	if v.Nodes == nil {
		v.Nodes = []backend.ExecutionRow{}
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
		return nil, inspectErrorf("flow edges: %w", err)
	}
	edges, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend.FlowEdge, error) {
		var e, up, down [16]byte
		var fe backend.FlowEdge
		err := r.Scan(&e, &up, &down, &fe.Kind, &fe.State, &fe.Resolution)
		fe.ID, fe.Upstream, fe.Downstream = model.UUID(e).String(), inspExecID(f.part, up), inspExecID(f.part, down)
		return fe, err
	})
	if err != nil {
		return nil, inspectErrorf("flow edges: %w", err)
	}
	v.Edges = append(v.Edges, edges...)
	err = pool.QueryRow(ctx, `SELECT public_flow_state FROM ff_flow_summary WHERE partition_key = $1 AND flow_id = $2`,
		f.part, [16]byte(f.id)).Scan(&v.SummaryState)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, inspectErrorf("flow summary: %w", err)
	}
	return v, nil
}

// pgIndexOf names the lane index (Valkey's name) a row's state belongs in.
func inspIndexOf(phase, elig string) string {
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

// inspLaneCensus reads, in one statement, every lane (the registry's and
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
const inspLaneCensus = `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, lane_id, lifecycle_phase, eligibility_state, count(*),
       coalesce(min(deadline_at_ms) FILTER (WHERE lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time'), 0)
  FROM ff_exec_core GROUP BY 2, 3, 4
UNION ALL
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, lane_id, '', '', 0, 0 FROM ff_lane_registry
UNION ALL
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, NULL, '', '', 0, 0`

// LaneCensus reads the lanes by name with their counts (InspectLanes),
// the server clock and the earliest wake time of a delayed execution (ms;
// 0: none is delayed), in one statement (inspLaneCensus): the census the
// admin server samples.
func (d *Driver) LaneCensus(ctx context.Context) (lanes []backend.LaneCounts, nowMs, earliestDelayed int64, err error) {
	rows, err := d.c.Pool().Query(ctx, inspLaneCensus)
	if err != nil {
		return nil, 0, 0, inspectErrorf("lane counts: %w", err)
	}
	defer rows.Close()
	at := map[string]int{}
	for rows.Next() {
		var lane *string // NULL: the clock's own row, there on an empty database
		var phase, elig string
		var now, n, due int64
		if err := rows.Scan(&now, &lane, &phase, &elig, &n, &due); err != nil {
			return nil, 0, 0, inspectErrorf("lane counts: %w", err)
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
			lanes = append(lanes, backend.LaneCounts{Lane: *lane, Counts: map[string]int64{}, State: "active"})
			for _, name := range model.LaneIndexNames {
				lanes[i].Counts[name] = 0
			}
		}
		if phase != "" {
			lanes[i].Counts[inspIndexOf(phase, elig)] += n
			lanes[i].Total += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, inspectErrorf("lane counts: %w", err)
	}
	slices.SortFunc(lanes, func(a, b backend.LaneCounts) int { return strings.Compare(a.Lane, b.Lane) })
	if lanes == nil {
		lanes = []backend.LaneCounts{}
	}
	return lanes, nowMs, earliestDelayed, nil
}

// InspectLanes implements backend.Inspector: it counts each lane's executions per state (laneCensus).
func (d *Driver) InspectLanes(ctx context.Context) ([]backend.LaneCounts, error) {
	lanes, _, _, err := d.LaneCensus(ctx)
	return lanes, err
}

// InspectWorkers implements backend.Inspector: it lists the registered workers of ns with the leases they hold.
func (d *Driver) InspectWorkers(ctx context.Context, ns string) ([]backend.WorkerInfo, error) {
	ws, err := d.c.ListWorkers(ctx, ns, "", 0)
	if err != nil {
		return nil, inspectErrorf("%w", err)
	}
	rows, err := d.c.Pool().Query(ctx, `SELECT a.worker_instance_id, count(*) FROM ff_exec_core e
  JOIN ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id AND a.attempt_index = e.attempt_index
 WHERE e.ownership_state = 'leased' AND a.worker_instance_id IS NOT NULL GROUP BY 1`)
	if err != nil {
		return nil, inspectErrorf("leases held: %w", err)
	}
	held := map[string]int64{}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, inspectErrorf("leases held: %w", err)
		}
		held[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, inspectErrorf("leases held: %w", err)
	}
	now := time.Now().UnixMilli()
	out := make([]backend.WorkerInfo, 0, len(ws))
	for _, w := range ws {
		lanes, caps := w.Lanes, w.Capabilities
		if lanes == nil {
			lanes = []string{}
		}
		if caps == nil {
			caps = []string{}
		}
		out = append(out, backend.WorkerInfo{InstanceID: w.InstanceID, WorkerID: w.WorkerID, Alive: w.LastHeartbeatMs+w.TTLMs > now,
			Lanes: lanes, Capabilities: caps, LastHeartbeatMs: w.LastHeartbeatMs, RegisteredAtMs: w.RegisteredAtMs,
			TTLMs: w.TTLMs, Leases: held[w.InstanceID]})
	}
	return out, nil
}

// inspCheckLane answers backend.ErrNotFound for a lane not among lanes
// ("" is every lane).
func inspCheckLane(lanes []string, lane string) error {
	if lane != "" && !slices.Contains(lanes, lane) {
		return fmt.Errorf("%w: unknown lane %q (lanes: %s)", backend.ErrNotFound, lane, strings.Join(lanes, ", "))
	}
	return nil
}

// inspectErrorf is an Inspector failure, "inspect: " and format: a
// database without fabric's schema (an undefined table) is
// backend.ErrNotMigrated, naming `fabric migrate`, as every other
// operation answers.
func inspectErrorf(format string, args ...any) error {
	err := fmt.Errorf("inspect: "+format, args...)
	var pe *pgconn.PgError
	if errors.Is(err, ErrNotMigrated) || (errors.As(err, &pe) && pe.Code == "42P01") {
		return fmt.Errorf("%w: %w", backend.ErrNotMigrated, err)
	}
	return err
}
