package valkey

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// inspTerminal are the public states of a terminal execution.
var inspTerminal = []string{model.PublicCompleted, model.PublicFailed, model.PublicCancelled, model.PublicExpired, model.PublicSkipped}

// indexesFor returns the lane index names state reads and the public
// state rows must have ("" any).
func inspIndexes(state string) ([]string, string, error) {
	switch {
	case state == "":
		return model.LaneIndexNames, "", nil
	case state == "blocked":
		var out []string
		for _, n := range model.LaneIndexNames {
			if strings.HasPrefix(n, "blocked:") {
				out = append(out, n)
			}
		}
		return out, "", nil
	case slices.Contains(model.LaneIndexNames, state):
		return []string{state}, "", nil
	case slices.Contains(inspTerminal, state):
		return []string{"terminal"}, state, nil
	}
	return nil, "", fmt.Errorf("%w: unknown state %q (one of %s)", backend.ErrInvalidInput, state, strings.Join(backend.ListStates(), ", "))
}

// laneNames returns the deployment's lanes (ff:idx:lanes), sorted.
func (d *Driver) laneNames(ctx context.Context) ([]string, error) {
	raw := d.c.Raw()
	lanes, err := raw.Do(ctx, raw.B().Smembers().Key(model.KeyLanesIndex).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("inspect: read %s: %w", model.KeyLanesIndex, err)
	}
	sort.Strings(lanes)
	return lanes, nil
}

func (d *Driver) checkLane(lanes []string, lane string) error {
	if lane != "" && !slices.Contains(lanes, lane) {
		return fmt.Errorf("%w: unknown lane %q (lanes: %s)", backend.ErrNotFound, lane, strings.Join(lanes, ", "))
	}
	return nil
}

func (d *Driver) partitions() []model.Partition {
	n := int(d.c.Partitions().Flow)
	out := make([]model.Partition, n)
	for i := range n {
		out[i] = model.Partition{Family: model.FamilyFlow, Index: uint16(i)}
	}
	return out
}

// inspRowFields are the exec_core fields of an backend.ExecutionRow, in order.
var inspRowFields = []string{"lane_id", "public_state", "lifecycle_phase", "execution_kind", "priority",
	"total_attempt_count", "created_at", "flow_id", "blocking_detail"}

func inspRow(id string, v []string) backend.ExecutionRow {
	at := func(i int) string {
		if i < len(v) {
			return v[i]
		}
		return ""
	}
	return backend.ExecutionRow{ID: id, Lane: at(0), State: at(1), Phase: at(2), Kind: at(3), Priority: inspAtoi(at(4)),
		Attempts: inspAtoi(at(5)), CreatedAt: int64(inspAtoi(at(6))), FlowID: at(7), Detail: at(8)}
}

func inspAtoi(s string) int { n, _ := strconv.Atoi(s); return n }

// rows reads the core fields of ids in one pipeline; a missing core (an
// index entry whose execution was trimmed) is dropped.
func (d *Driver) rows(ctx context.Context, ids []string) ([]backend.ExecutionRow, error) {
	at, err := d.rowsAt(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]backend.ExecutionRow, 0, len(at))
	for _, r := range at {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

// rowsAt is rows aligned with ids: nil where the core is missing.
func (d *Driver) rowsAt(ctx context.Context, ids []string) ([]*backend.ExecutionRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	raw := d.c.Raw()
	cmds := make([]vk.Completed, len(ids))
	for i, id := range ids {
		eid, err := model.ParseExecutionID(id)
		if err != nil {
			return nil, fmt.Errorf("inspect: index member %q: %w", id, err)
		}
		cmds[i] = raw.B().Hmget().Key(model.KeysFor(eid).Core()).Field(inspRowFields...).Build()
	}
	out := make([]*backend.ExecutionRow, len(ids))
	for i, r := range raw.DoMulti(ctx, cmds...) {
		vals, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("inspect: read core of %s: %w", ids[i], err)
		}
		v := make([]string, len(vals))
		for j := range vals {
			v[j], _ = vals[j].ToString()
		}
		if v[1] == "" && v[2] == "" {
			continue
		}
		row := inspRow(ids[i], v)
		out[i] = &row
	}
	return out, nil
}

// inspFilteredChunk is how many index members a filtered listing reads per
// round trip (an unfiltered one reads what the page still needs).
const inspFilteredChunk = 256

// ListExecutions implements backend.Inspector: it lists executions in index order: partition by
// partition, lane by lane, index by index, each index by score (eligible
// by priority, terminal oldest first).
func (d *Driver) ListExecutions(ctx context.Context, p *backend.ListExecutionsParams) (*backend.ExecutionPage, error) {
	q := *p
	off, err := q.Page()
	if err != nil {
		return nil, err
	}
	idx, wantState, err := inspIndexes(q.State)
	if err != nil {
		return nil, err
	}
	lanes, err := d.laneNames(ctx)
	if err != nil {
		return nil, err
	}
	if err := d.checkLane(lanes, q.Lane); err != nil {
		return nil, err
	}
	if q.Lane != "" {
		lanes = []string{q.Lane}
	}
	if q.Flow != "" {
		return d.listFlow(ctx, q, off, idx, wantState)
	}
	raw := d.c.Raw()
	var keys []string
	for _, p := range d.partitions() {
		pk := model.KeysOn(p)
		for _, l := range lanes {
			all := pk.LaneIndexes(l)
			for i, n := range model.LaneIndexNames {
				if slices.Contains(idx, n) {
					keys = append(keys, all[i])
				}
			}
		}
	}
	if q.Desc {
		slices.Reverse(keys)
	}
	cmds := make([]vk.Completed, len(keys))
	for i, k := range keys {
		cmds[i] = raw.B().Zcard().Key(k).Build()
	}
	counts := make([]int64, len(keys))
	for i, r := range raw.DoMulti(ctx, cmds...) {
		if counts[i], err = r.AsInt64(); err != nil {
			return nil, fmt.Errorf("inspect: ZCARD %s: %w", keys[i], err)
		}
	}
	page := &backend.ExecutionPage{Executions: []backend.ExecutionRow{}}
	pos := int64(0) // position in the listing of the first member of keys[k]
	for k := 0; k < len(keys) && len(page.Executions) < q.Limit; k++ {
		if pos+counts[k] <= off {
			pos += counts[k]
			continue
		}
		start := max(off-pos, 0)
		for start < counts[k] && len(page.Executions) < q.Limit {
			n := int64(q.Limit - len(page.Executions))
			if wantState != "" {
				n = max(n, inspFilteredChunk)
			}
			rng := raw.B().Zrange().Key(keys[k]).Min(strconv.FormatInt(start, 10)).Max(strconv.FormatInt(start+n-1, 10))
			var cmd vk.Completed
			if q.Desc {
				cmd = rng.Rev().Build()
			} else {
				cmd = rng.Build()
			}
			ids, err := raw.Do(ctx, cmd).AsStrSlice()
			if err != nil {
				return nil, fmt.Errorf("inspect: ZRANGE %s: %w", keys[k], err)
			}
			if len(ids) == 0 {
				break
			}
			rows, err := d.rowsAt(ctx, ids)
			if err != nil {
				return nil, err
			}
			consumed := len(ids)
			for j, r := range rows {
				if r != nil && (wantState == "" || r.State == wantState) {
					page.Executions = append(page.Executions, *r)
					if len(page.Executions) == q.Limit {
						consumed = j + 1 // the next page starts after this member
						break
					}
				}
			}
			start += int64(consumed)
			off = pos + start
		}
		if len(page.Executions) >= q.Limit && off < pos+counts[k] {
			break // the page ends inside this index
		}
		pos += counts[k]
		off = max(off, pos)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	if off < total && len(page.Executions) >= q.Limit {
		page.NextCursor = strconv.FormatInt(off, 10)
	}
	return page, nil
}

// listFlow lists a flow's members (sorted by id) with the query's lane
// and state filters.
func (d *Driver) listFlow(ctx context.Context, q backend.ListExecutionsParams, off int64, idx []string, wantState string) (*backend.ExecutionPage, error) {
	f, err := d.flowCore(ctx, q.Flow)
	if err != nil {
		return nil, err
	}
	members, err := d.flowMembers(ctx, f.keys)
	if err != nil {
		return nil, err
	}
	page := &backend.ExecutionPage{Executions: []backend.ExecutionRow{}}
	if off >= int64(len(members)) {
		return page, nil
	}
	rows, err := d.rows(ctx, members[off:])
	if err != nil {
		return nil, err
	}
	n := off
	for _, r := range rows {
		if len(page.Executions) == q.Limit {
			page.NextCursor = strconv.FormatInt(n, 10)
			break
		}
		n++
		if q.Lane != "" && r.Lane != q.Lane {
			continue
		}
		if wantState != "" && r.State != wantState {
			continue
		}
		if q.State != "" && wantState == "" && !slices.Contains(idx, inspIndexOf(r)) {
			continue
		}
		page.Executions = append(page.Executions, r)
	}
	return page, nil
}

// indexOfRow names the lane index an execution row belongs in.
func inspIndexOf(r backend.ExecutionRow) string {
	switch r.Phase {
	case model.PhaseTerminal:
		return "terminal"
	case model.PhaseActive:
		return "active"
	case model.PhaseSuspended:
		return "suspended"
	}
	switch r.State {
	case model.PublicDelayed:
		return "delayed"
	case model.PublicWaitingChildren:
		return "blocked:dependencies"
	case model.PublicRateLimited:
		return "blocked:budget"
	}
	return "eligible"
}

// InspectLanes implements backend.Inspector: it counts each lane's executions per index over every partition.
func (d *Driver) InspectLanes(ctx context.Context) ([]backend.LaneCounts, error) {
	lanes, err := d.laneNames(ctx)
	if err != nil {
		return nil, err
	}
	raw := d.c.Raw()
	out := make([]backend.LaneCounts, len(lanes))
	var cmds []vk.Completed
	for i, l := range lanes {
		out[i] = backend.LaneCounts{Lane: l, Counts: map[string]int64{}, State: "active"}
		for _, n := range model.LaneIndexNames {
			out[i].Counts[n] = 0
		}
	}
	parts := d.partitions()
	for _, p := range parts {
		pk := model.KeysOn(p)
		for _, l := range lanes {
			for _, k := range pk.LaneIndexes(l) {
				cmds = append(cmds, raw.B().Zcard().Key(k).Build())
			}
		}
	}
	owners, err := d.c.SlotOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	per := len(model.LaneIndexNames)
	inPart := make([]int64, len(lanes)) // the current partition's count per lane
	for i, r := range raw.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("inspect: ZCARD: %w", err)
		}
		li := (i / per) % len(lanes)
		out[li].Counts[model.LaneIndexNames[i%per]] += n
		out[li].Total += n
		inPart[li] += n
		if (i+1)%(per*len(lanes)) != 0 {
			continue
		}
		// The last index of the last lane of a partition.
		p := parts[i/(per*len(lanes))]
		node := owners[0]
		if len(owners) > 1 {
			node = owners[model.ClusterSlot(p.Tag())]
		}
		for l, c := range inPart {
			if c == 0 {
				continue
			}
			out[l].Partitions++
			if out[l].Nodes == nil {
				out[l].Nodes = map[string]int64{}
			}
			out[l].Nodes[node] += c
			inPart[l] = 0
		}
	}
	if err := d.laneSpreads(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// laneSpreads fills each lane's solo partitioner from its configuration
// hash.
func (d *Driver) laneSpreads(ctx context.Context, out []backend.LaneCounts) error {
	if len(out) == 0 {
		return nil
	}
	raw := d.c.Raw()
	cmds := make([]vk.Completed, len(out))
	for i, l := range out {
		cmds[i] = raw.B().Hgetall().Key(model.LaneConfigKey(l.Lane)).Build()
	}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return fmt.Errorf("inspect: read lane %q config: %w", out[i].Lane, err)
		}
		s, err := model.ParseLaneSpread(m)
		if err != nil {
			out[i].Partitioner = "invalid"
			continue
		}
		out[i].Partitioner = model.SoloPartitionerCrc16
		if s.Spread {
			out[i].Partitioner = model.SoloPartitionerSpread
			out[i].SpreadPartitions = len(s.Partitions(out[i].Lane, d.c.Partitions()))
		}
	}
	return nil
}

func inspHash(r vk.ValkeyResult) (map[string]string, error) {
	m, err := r.AsStrMap()
	if vk.IsValkeyNil(err) {
		return map[string]string{}, nil
	}
	return m, err
}

func inspFrames(r vk.ValkeyResult) ([]backend.Frame, error) {
	es, err := r.AsXRange()
	if err != nil {
		if vk.IsValkeyNil(err) {
			return []backend.Frame{}, nil
		}
		return nil, err
	}
	out := make([]backend.Frame, len(es))
	for i, e := range es {
		out[i] = backend.Frame{ID: e.ID, Fields: e.FieldValues}
	}
	return out, nil
}

// InspectExecution implements backend.Inspector; an id without a core is backend.ErrNotFound.
func (d *Driver) InspectExecution(ctx context.Context, eid model.ExecutionID) (*backend.ExecutionDetail, error) {
	var err error
	raw := d.c.Raw()
	k := model.KeysFor(eid)
	pk := model.KeysOn(eid.Partition())
	first := raw.DoMulti(ctx,
		raw.B().Hgetall().Key(k.Core()).Build(),
		raw.B().Getrange().Key(k.Payload()).Start(0).End(backend.DetailPreviewBytes-1).Build(),
		raw.B().Strlen().Key(k.Payload()).Build(),
		raw.B().Getrange().Key(k.Result()).Start(0).End(backend.DetailPreviewBytes-1).Build(),
		raw.B().Strlen().Key(k.Result()).Build(),
		raw.B().Hgetall().Key(k.Tags()).Build(),
		raw.B().Get().Key(k.Policy()).Build(),
		raw.B().Hgetall().Key(k.LeaseCurrent()).Build(),
		raw.B().Xrevrange().Key(k.LeaseHistory()).End("+").Start("-").Count(backend.DetailFrames).Build(),
		raw.B().Zrange().Key(k.Attempts()).Min("0").Max("-1").Build(),
		raw.B().Hgetall().Key(k.SuspensionCurrent()).Build(),
		raw.B().Smembers().Key(k.Waitpoints()).Build(),
		raw.B().Hgetall().Key(k.DepsMeta()).Build(),
		raw.B().Smembers().Key(k.DepsAllEdges()).Build(),
	)
	for i, r := range first {
		if err := r.Error(); err != nil && !vk.IsValkeyNil(err) {
			return nil, fmt.Errorf("inspect: read %s (%d): %w", eid, i, err)
		}
	}
	det := &backend.ExecutionDetail{ID: string(eid)}
	if det.Core, err = inspHash(first[0]); err != nil {
		return nil, fmt.Errorf("inspect: read core of %s: %w", eid, err)
	}
	if len(det.Core) == 0 {
		return nil, fmt.Errorf("%w: execution %s", backend.ErrNotFound, eid)
	}
	det.Payload, _ = first[1].ToString()
	det.PayloadBytes, _ = first[2].AsInt64()
	det.Result, _ = first[3].ToString()
	det.ResultBytes, _ = first[4].AsInt64()
	det.Tags, _ = inspHash(first[5])
	det.Policy, _ = first[6].ToString()
	det.Lease, _ = inspHash(first[7])
	if det.LeaseHistory, err = inspFrames(first[8]); err != nil {
		return nil, fmt.Errorf("inspect: lease history of %s: %w", eid, err)
	}
	slices.Reverse(det.LeaseHistory)
	attempts, _ := first[9].AsStrSlice()
	det.Suspension, _ = inspHash(first[10])
	wps, _ := first[11].AsStrSlice()
	if wp := det.Suspension["waitpoint_id"]; wp != "" && !slices.Contains(wps, wp) {
		wps = append(wps, wp)
	}
	if wp := det.Core["current_waitpoint_id"]; wp != "" && !slices.Contains(wps, wp) {
		wps = append(wps, wp)
	}
	sort.Strings(wps)
	deps, _ := inspHash(first[12])
	edges, _ := first[13].AsStrSlice()
	sort.Strings(edges)

	var cmds []vk.Completed
	idxs := make([]int, 0, len(attempts))
	for _, a := range attempts {
		i, err := strconv.Atoi(a)
		if err != nil {
			continue
		}
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		cmds = append(cmds, raw.B().Hgetall().Key(k.Attempt(i)).Build(),
			raw.B().Xrange().Key(k.Stream(i)).Start("-").End("+").Count(backend.DetailFrames).Build(),
			raw.B().Hget().Key(k.StreamMeta(i)).Field("closed_reason").Build())
	}
	for _, wp := range wps {
		cmds = append(cmds, raw.B().Hgetall().Key(pk.Waitpoint(wp)).Build())
	}
	for _, e := range edges {
		cmds = append(cmds, raw.B().Hgetall().Key(k.DepEdge(e)).Build())
	}
	res := raw.DoMulti(ctx, cmds...)
	n := 0
	det.Attempts = []backend.AttemptDetail{}
	for _, i := range idxs {
		a := backend.AttemptDetail{Index: i}
		if a.Fields, err = inspHash(res[n]); err != nil {
			return nil, fmt.Errorf("inspect: attempt %d of %s: %w", i, eid, err)
		}
		a.Error = a.Fields["failure_reason"]
		if a.Frames, err = inspFrames(res[n+1]); err != nil {
			return nil, fmt.Errorf("inspect: stream %d of %s: %w", i, eid, err)
		}
		a.StreamClosed, _ = res[n+2].ToString()
		det.Attempts = append(det.Attempts, a)
		n += 3
	}
	det.Waitpoints = []backend.WaitpointDetail{}
	for _, wp := range wps {
		f, err := inspHash(res[n])
		n++
		if err != nil {
			return nil, fmt.Errorf("inspect: waitpoint %s of %s: %w", wp, eid, err)
		}
		delete(f, "waitpoint_token") // a credential: never shown
		det.Waitpoints = append(det.Waitpoints, backend.WaitpointDetail{ID: wp, Fields: f})
	}
	if fl := det.Core["flow_id"]; fl != "" {
		m := &backend.FlowMembership{FlowID: fl, Upstream: []map[string]string{}}
		if len(deps) > 0 {
			m.DepsMeta = deps
		}
		for range edges {
			f, err := inspHash(res[n])
			n++
			if err != nil {
				return nil, fmt.Errorf("inspect: dependency edge of %s: %w", eid, err)
			}
			m.Upstream = append(m.Upstream, f)
		}
		det.Flow = m
	}
	inspReleaseWorkers(det)
	return det, nil
}

type inspFlowRef struct {
	id   model.UUID
	keys model.FlowKeys
	core map[string]string
}

func (d *Driver) flowCore(ctx context.Context, id string) (*inspFlowRef, error) {
	u, err := model.ParseUUID(id)
	if err != nil {
		return nil, fmt.Errorf("%w: flow id %q: %v", backend.ErrInvalidInput, id, err)
	}
	fk := model.FlowKeysFor(d.c.Partitions().FlowPartition(u), u)
	raw := d.c.Raw()
	core, err := inspHash(raw.Do(ctx, raw.B().Hgetall().Key(fk.Core()).Build()))
	if err != nil {
		return nil, fmt.Errorf("inspect: read flow %s: %w", id, err)
	}
	if len(core) == 0 {
		return nil, fmt.Errorf("%w: flow %s", backend.ErrNotFound, id)
	}
	return &inspFlowRef{id: u, keys: fk, core: core}, nil
}

func (d *Driver) flowMembers(ctx context.Context, fk model.FlowKeys) ([]string, error) {
	raw := d.c.Raw()
	members, err := raw.Do(ctx, raw.B().Smembers().Key(fk.Members()).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("inspect: flow members: %w", err)
	}
	sort.Strings(members)
	return members, nil
}

// InspectFlow implements backend.Inspector: it reads a flow's DAG.
func (d *Driver) InspectFlow(ctx context.Context, id model.UUID) (*backend.FlowView, error) {
	f, err := d.flowCore(ctx, id.String())
	if err != nil {
		return nil, err
	}
	members, err := d.flowMembers(ctx, f.keys)
	if err != nil {
		return nil, err
	}
	v := &backend.FlowView{ID: f.id.String(), Core: f.core, Nodes: []backend.ExecutionRow{}, Edges: []backend.FlowEdge{}, States: map[string]int{}}
	if v.Nodes, err = d.rows(ctx, members); err != nil {
		return nil, err
	}
	if v.Nodes == nil {
		v.Nodes = []backend.ExecutionRow{}
	}
	for _, n := range v.Nodes {
		v.States[n.State]++
	}
	raw := d.c.Raw()
	cmds := make([]vk.Completed, len(members))
	for i, m := range members {
		cmds[i] = raw.B().Smembers().Key(f.keys.Outgoing(model.ExecutionID(m))).Build()
	}
	var edgeIDs []string
	for i, r := range raw.DoMulti(ctx, cmds...) {
		ids, err := r.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("inspect: outgoing edges of %s: %w", members[i], err)
		}
		edgeIDs = append(edgeIDs, ids...)
	}
	sort.Strings(edgeIDs)
	cmds = cmds[:0]
	for _, e := range edgeIDs {
		cmds = append(cmds, raw.B().Hgetall().Key(f.keys.Edge(e)).Build())
	}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		e, err := inspHash(r)
		if err != nil {
			return nil, fmt.Errorf("inspect: edge %s: %w", edgeIDs[i], err)
		}
		v.Edges = append(v.Edges, backend.FlowEdge{ID: edgeIDs[i], Upstream: e["upstream_execution_id"],
			Downstream: e["downstream_execution_id"], Kind: e["dependency_kind"], State: e["edge_state"]})
	}
	// Each edge's resolution lives on its downstream (dep:<edge>); the
	// derived flow state in the projector's summary.
	cmds = cmds[:0]
	for _, e := range v.Edges {
		cmds = append(cmds, raw.B().Hget().Key(model.KeysFor(model.ExecutionID(e.Downstream)).DepEdge(e.ID)).Field("state").Build())
	}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		st, err := r.ToString()
		if err != nil && !vk.IsValkeyNil(err) {
			return nil, fmt.Errorf("inspect: edge %s resolution: %w", v.Edges[i].ID, err)
		}
		v.Edges[i].Resolution = cmp.Or(st, "unsatisfied")
	}
	st, err := raw.Do(ctx, raw.B().Hget().Key(f.keys.Summary()).Field("public_flow_state").Build()).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		return nil, fmt.Errorf("inspect: flow summary: %w", err)
	}
	v.SummaryState = st
	return v, nil
}

func inspCSV(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// InspectWorkers implements backend.Inspector: it lists the worker instances registered in namespace ns.
func (d *Driver) InspectWorkers(ctx context.Context, ns string) ([]backend.WorkerInfo, error) {
	raw := d.c.Raw()
	ids, err := raw.Do(ctx, raw.B().Smembers().Key(model.WorkersIndexKey(ns)).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("inspect: read workers of %q: %w", ns, err)
	}
	sort.Strings(ids)
	out := make([]backend.WorkerInfo, 0, len(ids))
	parts := d.partitions()
	for _, id := range ids {
		cmds := []vk.Completed{
			raw.B().Exists().Key(model.WorkerAliveKey(ns, id)).Build(),
			raw.B().Hgetall().Key(model.WorkerCapsKey(ns, id)).Build(),
		}
		for _, p := range parts {
			cmds = append(cmds, raw.B().Scard().Key(model.KeysOn(p).WorkerLeases(id)).Build())
		}
		res := raw.DoMulti(ctx, cmds...)
		alive, err := res[0].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("inspect: worker %s: %w", id, err)
		}
		caps, err := inspHash(res[1])
		if err != nil {
			return nil, fmt.Errorf("inspect: worker %s caps: %w", id, err)
		}
		w := backend.WorkerInfo{InstanceID: id, WorkerID: caps["worker_id"], Alive: alive == 1, Lanes: inspCSV(caps["lanes_csv"]),
			Capabilities: inspCSV(caps["caps_csv"]), LastHeartbeatMs: int64(inspAtoi(caps["last_heartbeat_ms"])),
			RegisteredAtMs: int64(inspAtoi(caps["registered_at_ms"])), TTLMs: int64(inspAtoi(caps["ttl_ms"]))}
		for _, r := range res[2:] {
			n, _ := r.AsInt64()
			w.Leases += n
		}
		out = append(out, w)
	}
	return out, nil
}

// inspReleaseWorkers names the worker of each lease event that does not
// (FlowFabric writes the worker on acquisitions, reclaims and expiries
// only): the worker of the attempt the event names, as the Postgres
// history reads it.
func inspReleaseWorkers(det *backend.ExecutionDetail) {
	for _, f := range det.LeaseHistory {
		if f.Fields["worker_id"] != "" {
			continue
		}
		i := slices.IndexFunc(det.Attempts, func(a backend.AttemptDetail) bool {
			return strconv.Itoa(a.Index) == f.Fields["attempt_index"]
		})
		if i >= 0 && det.Attempts[i].Fields["worker_id"] != "" {
			f.Fields["worker_id"] = det.Attempts[i].Fields["worker_id"]
		}
	}
}
