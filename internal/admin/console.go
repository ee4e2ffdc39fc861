package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

// Errors of the console queries; the API answers ErrNotFound with 404
// and ErrBadRequest with 400.
var (
	ErrNotFound   = errors.New("not found")
	ErrBadRequest = errors.New("bad request")
)

// Console reads and acts on a Valkey deployment's executions, flows,
// lanes and workers for the operator console (the /api routes and the
// CLI verbs on them). Keys come only from model's builders.
type Console struct {
	c *valkey.Client
}

// NewConsole returns a Console over c.
func NewConsole(c *valkey.Client) *Console { return &Console{c: c} }

// ListQuery filters and pages an execution listing.
type ListQuery struct {
	// Lane keeps one lane ("" every lane); an unknown lane is ErrNotFound.
	Lane string
	// State keeps one state: a lane index (eligible, delayed, active,
	// suspended, terminal, blocked or blocked:<reason>) or a terminal
	// public state (completed, failed, cancelled, expired, skipped).
	State string
	// Flow keeps the members of one flow (a UUID).
	Flow string
	// Limit is the page size (1..1000, default 50).
	Limit int
	// Cursor continues a listing where the previous page's NextCursor
	// left it ("" from the start).
	Cursor string
	// Desc lists in reverse: on Valkey the last partition, lane and index
	// first, each index by descending score (terminal newest first); on
	// Postgres newest first.
	Desc bool
}

// ExecutionRow is one execution of a listing.
type ExecutionRow struct {
	ID        string `json:"id"`
	Lane      string `json:"lane"`
	State     string `json:"state"`
	Phase     string `json:"phase"`
	Kind      string `json:"kind"`
	Priority  int    `json:"priority"`
	Attempts  int    `json:"attempts"`
	CreatedAt int64  `json:"created_at_ms"`
	FlowID    string `json:"flow_id,omitempty"`
	Detail    string `json:"blocking_detail,omitempty"`
}

// ExecutionPage is one page of a listing.
type ExecutionPage struct {
	Executions []ExecutionRow `json:"executions"`
	// NextCursor continues the listing ("" when it is complete). It is a
	// position in the listing's index order: executions that change
	// state between pages may be skipped or seen twice.
	NextCursor string `json:"next_cursor,omitempty"`
}

// terminalStates are the public states of a terminal execution.
var terminalStates = []string{model.PublicCompleted, model.PublicFailed, model.PublicCancelled, model.PublicExpired, model.PublicSkipped}

// ListStates are the values ListQuery.State accepts.
func ListStates() []string {
	out := append([]string{"blocked"}, model.LaneIndexNames...)
	return append(out, terminalStates...)
}

// indexesFor returns the lane index names state reads and the public
// state rows must have ("" any).
func indexesFor(state string) ([]string, string, error) {
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
	case slices.Contains(terminalStates, state):
		return []string{"terminal"}, state, nil
	}
	return nil, "", fmt.Errorf("%w: unknown state %q (one of %s)", ErrBadRequest, state, strings.Join(ListStates(), ", "))
}

// laneNames returns the deployment's lanes (ff:idx:lanes), sorted.
func (cs *Console) laneNames(ctx context.Context) ([]string, error) {
	raw := cs.c.Raw()
	lanes, err := raw.Do(ctx, raw.B().Smembers().Key(model.KeyLanesIndex).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("console: read %s: %w", model.KeyLanesIndex, err)
	}
	sort.Strings(lanes)
	return lanes, nil
}

func (cs *Console) checkLane(lanes []string, lane string) error {
	if lane != "" && !slices.Contains(lanes, lane) {
		return fmt.Errorf("%w: unknown lane %q (lanes: %s)", ErrNotFound, lane, strings.Join(lanes, ", "))
	}
	return nil
}

func (cs *Console) partitions() []model.Partition {
	n := int(cs.c.Partitions().Flow)
	out := make([]model.Partition, n)
	for i := range n {
		out[i] = model.Partition{Family: model.FamilyFlow, Index: uint16(i)}
	}
	return out
}

// rowFields are the exec_core fields of an ExecutionRow, in order.
var rowFields = []string{"lane_id", "public_state", "lifecycle_phase", "execution_kind", "priority",
	"total_attempt_count", "created_at", "flow_id", "blocking_detail"}

func rowFrom(id string, v []string) ExecutionRow {
	at := func(i int) string {
		if i < len(v) {
			return v[i]
		}
		return ""
	}
	return ExecutionRow{ID: id, Lane: at(0), State: at(1), Phase: at(2), Kind: at(3), Priority: atoiOr(at(4)),
		Attempts: atoiOr(at(5)), CreatedAt: int64(atoiOr(at(6))), FlowID: at(7), Detail: at(8)}
}

func atoiOr(s string) int { n, _ := strconv.Atoi(s); return n }

// rows reads the core fields of ids in one pipeline; a missing core (an
// index entry whose execution was trimmed) is dropped.
func (cs *Console) rows(ctx context.Context, ids []string) ([]ExecutionRow, error) {
	at, err := cs.rowsAt(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]ExecutionRow, 0, len(at))
	for _, r := range at {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

// rowsAt is rows aligned with ids: nil where the core is missing.
func (cs *Console) rowsAt(ctx context.Context, ids []string) ([]*ExecutionRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	raw := cs.c.Raw()
	cmds := make([]vk.Completed, len(ids))
	for i, id := range ids {
		eid, err := model.ParseExecutionID(id)
		if err != nil {
			return nil, fmt.Errorf("console: index member %q: %w", id, err)
		}
		cmds[i] = raw.B().Hmget().Key(model.KeysFor(eid).Core()).Field(rowFields...).Build()
	}
	out := make([]*ExecutionRow, len(ids))
	for i, r := range raw.DoMulti(ctx, cmds...) {
		vals, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("console: read core of %s: %w", ids[i], err)
		}
		v := make([]string, len(vals))
		for j := range vals {
			v[j], _ = vals[j].ToString()
		}
		if v[1] == "" && v[2] == "" {
			continue
		}
		row := rowFrom(ids[i], v)
		out[i] = &row
	}
	return out, nil
}

// filteredChunk is how many index members a filtered listing reads per
// round trip (an unfiltered one reads what the page still needs).
const filteredChunk = 256

func (q *ListQuery) normalize() (int64, error) {
	if q.Limit == 0 {
		q.Limit = 50
	}
	if q.Limit < 1 || q.Limit > 1000 {
		return 0, fmt.Errorf("%w: limit must be 1..1000, got %d", ErrBadRequest, q.Limit)
	}
	if q.Cursor == "" {
		return 0, nil
	}
	off, err := strconv.ParseInt(q.Cursor, 10, 64)
	if err != nil || off < 0 {
		return 0, fmt.Errorf("%w: cursor %q is not one this API returned", ErrBadRequest, q.Cursor)
	}
	return off, nil
}

// ListExecutions lists executions in index order: partition by
// partition, lane by lane, index by index, each index by score (eligible
// by priority, terminal oldest first).
func (cs *Console) ListExecutions(ctx context.Context, q ListQuery) (*ExecutionPage, error) {
	off, err := q.normalize()
	if err != nil {
		return nil, err
	}
	idx, wantState, err := indexesFor(q.State)
	if err != nil {
		return nil, err
	}
	lanes, err := cs.laneNames(ctx)
	if err != nil {
		return nil, err
	}
	if err := cs.checkLane(lanes, q.Lane); err != nil {
		return nil, err
	}
	if q.Lane != "" {
		lanes = []string{q.Lane}
	}
	if q.Flow != "" {
		return cs.listFlow(ctx, q, off, idx, wantState)
	}
	raw := cs.c.Raw()
	var keys []string
	for _, p := range cs.partitions() {
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
			return nil, fmt.Errorf("console: ZCARD %s: %w", keys[i], err)
		}
	}
	page := &ExecutionPage{Executions: []ExecutionRow{}}
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
				n = max(n, filteredChunk)
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
				return nil, fmt.Errorf("console: ZRANGE %s: %w", keys[k], err)
			}
			if len(ids) == 0 {
				break
			}
			rows, err := cs.rowsAt(ctx, ids)
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
func (cs *Console) listFlow(ctx context.Context, q ListQuery, off int64, idx []string, wantState string) (*ExecutionPage, error) {
	f, err := cs.flowCore(ctx, q.Flow)
	if err != nil {
		return nil, err
	}
	members, err := cs.flowMembers(ctx, f.keys)
	if err != nil {
		return nil, err
	}
	page := &ExecutionPage{Executions: []ExecutionRow{}}
	if off >= int64(len(members)) {
		return page, nil
	}
	rows, err := cs.rows(ctx, members[off:])
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
		if q.State != "" && wantState == "" && !slices.Contains(idx, indexOfRow(r)) {
			continue
		}
		page.Executions = append(page.Executions, r)
	}
	return page, nil
}

// indexOfRow names the lane index an execution row belongs in.
func indexOfRow(r ExecutionRow) string {
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

// LaneCounts is one lane's executions by index.
type LaneCounts struct {
	Lane string `json:"lane"`
	// Counts are per lane index name (eligible, ..., blocked:operator).
	Counts map[string]int64 `json:"counts"`
	Total  int64            `json:"total"`
	// State is the lane's state: always "active" (FlowFabric keeps no
	// lane state on Valkey, so a lane cannot be paused).
	State string `json:"state"`
	// Partitioner is the lane's solo partitioner (model.LaneConfigKey):
	// "crc16", FlowFabric's one partition per lane, or "spread".
	Partitioner string `json:"partitioner,omitempty"`
	// SpreadPartitions is how many partitions a spread lane places its
	// executions on (0 for crc16).
	SpreadPartitions int `json:"spread_partitions,omitempty"`
	// Partitions is how many partitions hold any of the lane's
	// executions (flow members included).
	Partitions int `json:"partitions"`
	// Nodes counts the lane's executions per Valkey node (host:port on a
	// cluster), nodes without any left out.
	Nodes map[string]int64 `json:"nodes,omitempty"`
}

// Lanes counts each lane's executions per index over every partition.
func (cs *Console) Lanes(ctx context.Context) ([]LaneCounts, error) {
	lanes, err := cs.laneNames(ctx)
	if err != nil {
		return nil, err
	}
	raw := cs.c.Raw()
	out := make([]LaneCounts, len(lanes))
	var cmds []vk.Completed
	for i, l := range lanes {
		out[i] = LaneCounts{Lane: l, Counts: map[string]int64{}, State: "active"}
		for _, n := range model.LaneIndexNames {
			out[i].Counts[n] = 0
		}
	}
	parts := cs.partitions()
	for _, p := range parts {
		pk := model.KeysOn(p)
		for _, l := range lanes {
			for _, k := range pk.LaneIndexes(l) {
				cmds = append(cmds, raw.B().Zcard().Key(k).Build())
			}
		}
	}
	owners, err := cs.c.SlotOwners(ctx)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	per := len(model.LaneIndexNames)
	inPart := make([]int64, len(lanes)) // the current partition's count per lane
	for i, r := range raw.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("console: ZCARD: %w", err)
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
	if err := cs.laneSpreads(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// laneSpreads fills each lane's solo partitioner from its configuration
// hash.
func (cs *Console) laneSpreads(ctx context.Context, out []LaneCounts) error {
	if len(out) == 0 {
		return nil
	}
	raw := cs.c.Raw()
	cmds := make([]vk.Completed, len(out))
	for i, l := range out {
		cmds[i] = raw.B().Hgetall().Key(model.LaneConfigKey(l.Lane)).Build()
	}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return fmt.Errorf("console: read lane %q config: %w", out[i].Lane, err)
		}
		s, err := model.ParseLaneSpread(m)
		if err != nil {
			out[i].Partitioner = "invalid"
			continue
		}
		out[i].Partitioner = model.SoloPartitionerCrc16
		if s.Spread {
			out[i].Partitioner = model.SoloPartitionerSpread
			out[i].SpreadPartitions = len(s.Partitions(out[i].Lane, cs.c.Partitions()))
		}
	}
	return nil
}

// Attempt is one attempt of an execution.
type Attempt struct {
	Index  int               `json:"index"`
	Fields map[string]string `json:"fields"`
	// Error is the attempt's failure reason ("" when it did not fail).
	Error string `json:"error,omitempty"`
	// Frames are the first frames of its output stream.
	Frames []Frame `json:"frames,omitempty"`
	// StreamClosed is the stream's close reason ("" while open or absent).
	StreamClosed string `json:"stream_closed,omitempty"`
}

// Frame is one stream entry or lease-history event.
type Frame struct {
	ID     string            `json:"id"`
	Fields map[string]string `json:"fields"`
}

// Waitpoint is one waitpoint of an execution (without its token).
type Waitpoint struct {
	ID     string            `json:"id"`
	Fields map[string]string `json:"fields"`
}

// FlowMembership is an execution's place in its flow.
type FlowMembership struct {
	FlowID string `json:"flow_id"`
	// Upstream are the edges into the execution.
	Upstream []map[string]string `json:"upstream"`
	// DepsMeta is its dependency counters.
	DepsMeta map[string]string `json:"deps_meta,omitempty"`
}

// ExecutionDetail is everything the console shows of one execution.
type ExecutionDetail struct {
	ID   string            `json:"id"`
	Core map[string]string `json:"core"`
	// Payload is the first PreviewBytes of the input payload, Result of
	// the result; PayloadBytes and ResultBytes are their full sizes.
	Payload      string            `json:"payload_preview"`
	PayloadBytes int64             `json:"payload_bytes"`
	Result       string            `json:"result_preview,omitempty"`
	ResultBytes  int64             `json:"result_bytes"`
	Tags         map[string]string `json:"tags,omitempty"`
	Policy       string            `json:"policy,omitempty"`
	Lease        map[string]string `json:"lease,omitempty"`
	LeaseHistory []Frame           `json:"lease_history"`
	Attempts     []Attempt         `json:"attempts"`
	Suspension   map[string]string `json:"suspension,omitempty"`
	Waitpoints   []Waitpoint       `json:"waitpoints"`
	Flow         *FlowMembership   `json:"flow,omitempty"`
}

// Bounds of an execution detail.
const (
	// PreviewBytes is how much of a payload or result the detail shows.
	PreviewBytes = 1024
	// detailFrames is how many stream frames per attempt and lease
	// events the detail shows.
	detailFrames = 50
)

// ParseID parses an execution id for the console (ErrBadRequest).
func ParseID(s string) (model.ExecutionID, error) {
	eid, err := model.ParseExecutionID(s)
	if err != nil {
		return "", fmt.Errorf("%w: execution id %q: %v", ErrBadRequest, s, err)
	}
	return eid, nil
}

func hash(r vk.ValkeyResult) (map[string]string, error) {
	m, err := r.AsStrMap()
	if vk.IsValkeyNil(err) {
		return map[string]string{}, nil
	}
	return m, err
}

func frames(r vk.ValkeyResult) ([]Frame, error) {
	es, err := r.AsXRange()
	if err != nil {
		if vk.IsValkeyNil(err) {
			return []Frame{}, nil
		}
		return nil, err
	}
	out := make([]Frame, len(es))
	for i, e := range es {
		out[i] = Frame{ID: e.ID, Fields: e.FieldValues}
	}
	return out, nil
}

// Execution reads one execution; an id without a core is ErrNotFound.
func (cs *Console) Execution(ctx context.Context, id string) (*ExecutionDetail, error) {
	eid, err := ParseID(id)
	if err != nil {
		return nil, err
	}
	raw := cs.c.Raw()
	k := model.KeysFor(eid)
	pk := model.KeysOn(eid.Partition())
	first := raw.DoMulti(ctx,
		raw.B().Hgetall().Key(k.Core()).Build(),
		raw.B().Getrange().Key(k.Payload()).Start(0).End(PreviewBytes-1).Build(),
		raw.B().Strlen().Key(k.Payload()).Build(),
		raw.B().Getrange().Key(k.Result()).Start(0).End(PreviewBytes-1).Build(),
		raw.B().Strlen().Key(k.Result()).Build(),
		raw.B().Hgetall().Key(k.Tags()).Build(),
		raw.B().Get().Key(k.Policy()).Build(),
		raw.B().Hgetall().Key(k.LeaseCurrent()).Build(),
		raw.B().Xrevrange().Key(k.LeaseHistory()).End("+").Start("-").Count(detailFrames).Build(),
		raw.B().Zrange().Key(k.Attempts()).Min("0").Max("-1").Build(),
		raw.B().Hgetall().Key(k.SuspensionCurrent()).Build(),
		raw.B().Smembers().Key(k.Waitpoints()).Build(),
		raw.B().Hgetall().Key(k.DepsMeta()).Build(),
		raw.B().Smembers().Key(k.DepsAllEdges()).Build(),
	)
	for i, r := range first {
		if err := r.Error(); err != nil && !vk.IsValkeyNil(err) {
			return nil, fmt.Errorf("console: read %s (%d): %w", eid, i, err)
		}
	}
	d := &ExecutionDetail{ID: string(eid)}
	if d.Core, err = hash(first[0]); err != nil {
		return nil, fmt.Errorf("console: read core of %s: %w", eid, err)
	}
	if len(d.Core) == 0 {
		return nil, fmt.Errorf("%w: execution %s", ErrNotFound, eid)
	}
	d.Payload, _ = first[1].ToString()
	d.PayloadBytes, _ = first[2].AsInt64()
	d.Result, _ = first[3].ToString()
	d.ResultBytes, _ = first[4].AsInt64()
	d.Tags, _ = hash(first[5])
	d.Policy, _ = first[6].ToString()
	d.Lease, _ = hash(first[7])
	if d.LeaseHistory, err = frames(first[8]); err != nil {
		return nil, fmt.Errorf("console: lease history of %s: %w", eid, err)
	}
	slices.Reverse(d.LeaseHistory)
	attempts, _ := first[9].AsStrSlice()
	d.Suspension, _ = hash(first[10])
	wps, _ := first[11].AsStrSlice()
	if wp := d.Suspension["waitpoint_id"]; wp != "" && !slices.Contains(wps, wp) {
		wps = append(wps, wp)
	}
	if wp := d.Core["current_waitpoint_id"]; wp != "" && !slices.Contains(wps, wp) {
		wps = append(wps, wp)
	}
	sort.Strings(wps)
	deps, _ := hash(first[12])
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
			raw.B().Xrange().Key(k.Stream(i)).Start("-").End("+").Count(detailFrames).Build(),
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
	d.Attempts = []Attempt{}
	for _, i := range idxs {
		a := Attempt{Index: i}
		if a.Fields, err = hash(res[n]); err != nil {
			return nil, fmt.Errorf("console: attempt %d of %s: %w", i, eid, err)
		}
		a.Error = a.Fields["failure_reason"]
		if a.Frames, err = frames(res[n+1]); err != nil {
			return nil, fmt.Errorf("console: stream %d of %s: %w", i, eid, err)
		}
		a.StreamClosed, _ = res[n+2].ToString()
		d.Attempts = append(d.Attempts, a)
		n += 3
	}
	d.Waitpoints = []Waitpoint{}
	for _, wp := range wps {
		f, err := hash(res[n])
		n++
		if err != nil {
			return nil, fmt.Errorf("console: waitpoint %s of %s: %w", wp, eid, err)
		}
		delete(f, "waitpoint_token") // a credential: never shown
		d.Waitpoints = append(d.Waitpoints, Waitpoint{ID: wp, Fields: f})
	}
	if fl := d.Core["flow_id"]; fl != "" {
		m := &FlowMembership{FlowID: fl, Upstream: []map[string]string{}}
		if len(deps) > 0 {
			m.DepsMeta = deps
		}
		for range edges {
			f, err := hash(res[n])
			n++
			if err != nil {
				return nil, fmt.Errorf("console: dependency edge of %s: %w", eid, err)
			}
			m.Upstream = append(m.Upstream, f)
		}
		d.Flow = m
	}
	return d, nil
}

// FlowEdge is one dependency edge of a flow.
type FlowEdge struct {
	ID         string `json:"id"`
	Upstream   string `json:"upstream"`
	Downstream string `json:"downstream"`
	Kind       string `json:"kind"`
	// State is the edge record's edge_state as stored: on Valkey
	// FlowFabric writes "pending" once and never updates it; on Postgres
	// "applied" once staged.
	State string `json:"state"`
	// Resolution is what the edge's upstream did to it, the same words on
	// both backends: "unsatisfied" (not resolved yet), "satisfied" (the
	// upstream succeeded) or "impossible" (it ended otherwise). Valkey
	// reads the downstream's dep:<edge> state; Postgres the outcome of the
	// upstream's latest dispatched completion event.
	Resolution string `json:"resolution"`
}

// FlowView is a flow's DAG: its record, members and edges.
type FlowView struct {
	ID    string            `json:"id"`
	Core  map[string]string `json:"core"`
	Nodes []ExecutionRow    `json:"nodes"`
	Edges []FlowEdge        `json:"edges"`
	// States counts the members per public state.
	States map[string]int `json:"states"`
	// SummaryState is the flow state the flow projector derived from its
	// members (completed, failed, running, blocked, open, ...), "" before
	// its first pass. Core's public_flow_state is only ever open or
	// cancelled: FlowFabric never writes a flow's completion there.
	SummaryState string `json:"summary_state,omitempty"`
}

type flowRef struct {
	id   model.UUID
	keys model.FlowKeys
	core map[string]string
}

func (cs *Console) flowCore(ctx context.Context, id string) (*flowRef, error) {
	u, err := model.ParseUUID(id)
	if err != nil {
		return nil, fmt.Errorf("%w: flow id %q: %v", ErrBadRequest, id, err)
	}
	fk := model.FlowKeysFor(cs.c.Partitions().FlowPartition(u), u)
	raw := cs.c.Raw()
	core, err := hash(raw.Do(ctx, raw.B().Hgetall().Key(fk.Core()).Build()))
	if err != nil {
		return nil, fmt.Errorf("console: read flow %s: %w", id, err)
	}
	if len(core) == 0 {
		return nil, fmt.Errorf("%w: flow %s", ErrNotFound, id)
	}
	return &flowRef{id: u, keys: fk, core: core}, nil
}

func (cs *Console) flowMembers(ctx context.Context, fk model.FlowKeys) ([]string, error) {
	raw := cs.c.Raw()
	members, err := raw.Do(ctx, raw.B().Smembers().Key(fk.Members()).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("console: flow members: %w", err)
	}
	sort.Strings(members)
	return members, nil
}

// Flow reads a flow's DAG.
func (cs *Console) Flow(ctx context.Context, id string) (*FlowView, error) {
	f, err := cs.flowCore(ctx, id)
	if err != nil {
		return nil, err
	}
	members, err := cs.flowMembers(ctx, f.keys)
	if err != nil {
		return nil, err
	}
	v := &FlowView{ID: f.id.String(), Core: f.core, Nodes: []ExecutionRow{}, Edges: []FlowEdge{}, States: map[string]int{}}
	if v.Nodes, err = cs.rows(ctx, members); err != nil {
		return nil, err
	}
	if v.Nodes == nil {
		v.Nodes = []ExecutionRow{}
	}
	for _, n := range v.Nodes {
		v.States[n.State]++
	}
	raw := cs.c.Raw()
	cmds := make([]vk.Completed, len(members))
	for i, m := range members {
		cmds[i] = raw.B().Smembers().Key(f.keys.Outgoing(model.ExecutionID(m))).Build()
	}
	var edgeIDs []string
	for i, r := range raw.DoMulti(ctx, cmds...) {
		ids, err := r.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("console: outgoing edges of %s: %w", members[i], err)
		}
		edgeIDs = append(edgeIDs, ids...)
	}
	sort.Strings(edgeIDs)
	cmds = cmds[:0]
	for _, e := range edgeIDs {
		cmds = append(cmds, raw.B().Hgetall().Key(f.keys.Edge(e)).Build())
	}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		e, err := hash(r)
		if err != nil {
			return nil, fmt.Errorf("console: edge %s: %w", edgeIDs[i], err)
		}
		v.Edges = append(v.Edges, FlowEdge{ID: edgeIDs[i], Upstream: e["upstream_execution_id"],
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
			return nil, fmt.Errorf("console: edge %s resolution: %w", v.Edges[i].ID, err)
		}
		v.Edges[i].Resolution = cmp.Or(st, "unsatisfied")
	}
	st, err := raw.Do(ctx, raw.B().Hget().Key(f.keys.Summary()).Field("public_flow_state").Build()).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		return nil, fmt.Errorf("console: flow summary: %w", err)
	}
	v.SummaryState = st
	return v, nil
}

// WorkerInfo is one registered worker instance.
type WorkerInfo struct {
	InstanceID string `json:"instance_id"`
	WorkerID   string `json:"worker_id"`
	// Alive reports the liveness key (false: the registration lapsed).
	Alive        bool     `json:"alive"`
	Lanes        []string `json:"lanes"`
	Capabilities []string `json:"capabilities"`
	// LastHeartbeatMs and RegisteredAtMs are the worker's clock.
	LastHeartbeatMs int64 `json:"last_heartbeat_ms"`
	RegisteredAtMs  int64 `json:"registered_at_ms"`
	TTLMs           int64 `json:"ttl_ms"`
	// Leases counts the executions it holds a lease on.
	Leases int64 `json:"leases"`
}

func csv(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}

// Workers lists the worker instances registered in namespace ns.
func (cs *Console) Workers(ctx context.Context, ns string) ([]WorkerInfo, error) {
	raw := cs.c.Raw()
	ids, err := raw.Do(ctx, raw.B().Smembers().Key(model.WorkersIndexKey(ns)).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("console: read workers of %q: %w", ns, err)
	}
	sort.Strings(ids)
	out := make([]WorkerInfo, 0, len(ids))
	parts := cs.partitions()
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
			return nil, fmt.Errorf("console: worker %s: %w", id, err)
		}
		caps, err := hash(res[1])
		if err != nil {
			return nil, fmt.Errorf("console: worker %s caps: %w", id, err)
		}
		w := WorkerInfo{InstanceID: id, WorkerID: caps["worker_id"], Alive: alive == 1, Lanes: csv(caps["lanes_csv"]),
			Capabilities: csv(caps["caps_csv"]), LastHeartbeatMs: int64(atoiOr(caps["last_heartbeat_ms"])),
			RegisteredAtMs: int64(atoiOr(caps["registered_at_ms"])), TTLMs: int64(atoiOr(caps["ttl_ms"]))}
		for _, r := range res[2:] {
			n, _ := r.AsInt64()
			w.Leases += n
		}
		out = append(out, w)
	}
	return out, nil
}
