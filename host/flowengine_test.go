package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// flowEnv is a host running flow-engine plugins over a fresh database of
// the shared server, with a client routing on the host's 4/2/2
// partitions.
type flowEnv struct {
	t    *testing.T
	c    *valkey.Client
	h    *host.Host
	sig  *host.CompletionSignals
	ctx  context.Context
	logs *logBuffer
}

type flowOpts struct {
	plugins  []string
	config   map[string]host.PluginConfig
	listener bool
	now      func(context.Context) (int64, error)
	url      string // a private server; "" = the shared one
	observer host.Observer
}

var flowParts = model.PartitionConfig{Flow: 4, Budget: 2, Quota: 2}

// clientDB returns the logical database a client of valkeytest uses.
func clientDB(t *testing.T, c *valkey.Client) int {
	t.Helper()
	info, err := c.Raw().Do(context.Background(), c.Raw().B().ClientInfo().Build()).ToString()
	if err != nil {
		t.Fatalf("CLIENT INFO: %v", err)
	}
	for _, f := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(f, "db="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("CLIENT INFO without db: %s", info)
	return 0
}

func setupFlowEnv(t *testing.T, o flowOpts) *flowEnv {
	t.Helper()
	ctx := valkeytest.Context(t, 120*time.Second)
	url, db := o.url, 0
	if url == "" {
		base := valkeytest.Client(t)
		url, db = valkeytest.Server(t).URL(), clientDB(t, base)
	}
	c, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, DB: db, Partitions: flowParts, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.EnsureLibrary(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, p := range o.plugins {
		copyFile(t, fixture(t, p), filepath.Join(dir, p+".wasm"))
	}
	logs := &logBuffer{}
	sig := &host.CompletionSignals{}
	sig.Init()
	h, err := host.New(host.Config{
		PluginDir: dir, CacheDir: cacheDir, Backend: c, Now: o.now,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Partitions: flowParts, Plugins: o.config, Observer: o.observer,
		Completions: host.CompletionConfig{Enabled: o.listener, Signals: sig, RetryDelay: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	select {
	case <-h.Started():
	case <-time.After(60 * time.Second):
		t.Fatal("host did not start")
	}
	e := &flowEnv{t: t, c: c, h: h, sig: sig, ctx: ctx, logs: logs}
	if o.listener {
		if n := sig.Subscribed.WaitOrTimeout(t); n != 1 {
			t.Fatalf("first subscription count %d", n)
		}
	}
	return e
}

func (e *flowEnv) flow() model.UUID {
	e.t.Helper()
	id := model.NewUUID()
	if _, err := e.c.CreateFlow(e.ctx, id, "dag", "ns", 0); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// members creates n executions in flow.
func (e *flowEnv) members(flow model.UUID, n int) []model.ExecutionID {
	e.t.Helper()
	out := make([]model.ExecutionID, n)
	for i := range out {
		eid := e.c.Partitions().NewFlowExecutionID(flow)
		if _, err := e.c.CreateExecution(e.ctx, &valkey.CreateExecutionParams{ExecutionID: eid, Namespace: "ns", LaneID: "default", ExecutionKind: "k"}); err != nil {
			e.t.Fatal(err)
		}
		if _, _, err := e.c.AddExecutionToFlow(e.ctx, flow, eid, 0); err != nil {
			e.t.Fatal(err)
		}
		out[i] = eid
	}
	return out
}

func (e *flowEnv) revision(flow model.UUID) int64 {
	e.t.Helper()
	fk := model.FlowKeysFor(e.c.Partitions().FlowPartition(flow), flow)
	n, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Hget().Key(fk.Core()).Field("graph_revision").Build()).AsInt64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// edges stages and applies up→down edges, tracking the graph revision.
func (e *flowEnv) edges(flow model.UUID, pairs ...[2]model.ExecutionID) {
	e.t.Helper()
	rev := e.revision(flow)
	for _, pr := range pairs {
		p := &valkey.EdgeParams{Flow: flow, EdgeID: model.NewUUID(), Upstream: pr[0], Downstream: pr[1], GraphRevision: rev}
		var err error
		if rev, err = e.c.StageDependencyEdge(e.ctx, p); err != nil {
			e.t.Fatal(err)
		}
		p.GraphRevision = rev
		if _, _, err := e.c.ApplyDependencyToChild(e.ctx, p); err != nil {
			e.t.Fatal(err)
		}
	}
}

// claim plays a worker taking eid.
func (e *flowEnv) claim(eid model.ExecutionID) valkey.LeaseFence {
	e.t.Helper()
	if err := e.c.IssueClaimGrant(e.ctx, &valkey.IssueClaimGrantParams{ExecutionID: eid, WorkerID: "w1",
		WorkerInstanceID: "wi1", Lane: "default", GrantTTLMs: 5000}); err != nil {
		e.t.Fatalf("grant %s: %v", eid, err)
	}
	r, err := e.c.ClaimExecution(e.ctx, &valkey.ClaimExecutionParams{ExecutionID: eid, WorkerID: "w1",
		WorkerInstanceID: "wi1", LaneID: "default", LeaseTTLMs: 30_000})
	if err != nil {
		e.t.Fatalf("claim %s: %v", eid, err)
	}
	return valkey.LeaseFence{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch, AttemptID: r.AttemptID}
}

// complete claims and completes eid like a worker; it returns when the
// completion (and its PUBLISH) is done.
func (e *flowEnv) complete(eid model.ExecutionID) time.Time {
	e.t.Helper()
	f := e.claim(eid)
	if err := e.c.CompleteExecution(e.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: f, Result: "r"}); err != nil {
		e.t.Fatalf("complete %s: %v", eid, err)
	}
	return time.Now()
}

func (e *flowEnv) fail(eid model.ExecutionID) {
	e.t.Helper()
	f := e.claim(eid)
	if _, err := e.c.FailExecution(e.ctx, &valkey.FailExecutionParams{ExecutionID: eid, Fence: f, FailureReason: "boom"}); err != nil {
		e.t.Fatalf("fail %s: %v", eid, err)
	}
}

func (e *flowEnv) eligible(eid model.ExecutionID) bool {
	err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Zscore().Key(model.KeysOn(eid.Partition()).LaneEligible("default")).Member(string(eid)).Build()).Error()
	return err == nil
}

func (e *flowEnv) core(eid model.ExecutionID, field string) string {
	v, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Hget().Key(model.KeysFor(eid).Core()).Field(field).Build()).ToString()
	return v
}

// await returns once cond holds, re-checking after every dispatcher call
// (no polling on the engine's side; the test re-checks on each signal),
// and returns the end time of the dispatch that made it true (or now
// when it already held).
// await waits until cond holds: checked after every dispatcher call (the
// returned time is that call's end) and, since a reconciler may be the
// one that makes it true, polled every 50 ms too (then the time of the
// check).
func (e *flowEnv) await(what string, cond func() bool) time.Time {
	e.t.Helper()
	deadline := time.After(60 * time.Second)
	if cond() {
		return time.Now()
	}
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case rec := <-e.sig.Dispatched.C():
			if cond() {
				return rec.End
			}
		case <-poll.C:
			if cond() {
				return time.Now()
			}
		case <-deadline:
			e.t.Fatalf("not true within 60s: %s", what)
		}
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

var dispatchers = []string{"dependency", "edge_cancel"}

// A diamond A→{B,C}→D and 10-level chains complete in order, driven only
// by completions through the dependency dispatcher (no reconciler is
// loaded); per-level completion→eligible latency is reported.
func TestFlowEngineDiamondAndChain(t *testing.T) {
	e := setupFlowEnv(t, flowOpts{plugins: dispatchers, listener: true})

	flow := e.flow()
	m := e.members(flow, 4)
	a, b, c, d := m[0], m[1], m[2], m[3]
	e.edges(flow, [2]model.ExecutionID{a, b}, [2]model.ExecutionID{a, c}, [2]model.ExecutionID{b, d}, [2]model.ExecutionID{c, d})
	for _, x := range []model.ExecutionID{b, c, d} {
		if e.eligible(x) {
			t.Fatalf("%s eligible before its upstreams", x)
		}
	}
	e.complete(a)
	e.await("B and C eligible", func() bool { return e.eligible(b) && e.eligible(c) })
	if e.eligible(d) {
		t.Fatal("D eligible after A only")
	}
	e.complete(b)
	e.await("B's edge to D resolved", func() bool {
		return e.core(d, "eligibility_state") == "blocked_by_dependencies" && unresolved(e, d) == 1
	})
	if e.eligible(d) {
		t.Fatal("D eligible with C running")
	}
	e.complete(c)
	e.await("D eligible", func() bool { return e.eligible(d) })
	e.complete(d)

	// 10-level chains: level k completes → level k+1 eligible.
	const levels, runs = 10, 3
	var lat []time.Duration
	for range runs {
		flow := e.flow()
		chain := e.members(flow, levels)
		for i := 0; i+1 < levels; i++ {
			e.edges(flow, [2]model.ExecutionID{chain[i], chain[i+1]})
		}
		for i := 0; i < levels; i++ {
			if i > 0 && e.eligible(chain[i]) && !e.eligible(chain[i-1]) && e.core(chain[i-1], "terminal_outcome") != "success" {
				t.Fatalf("level %d eligible before level %d completed", i, i-1)
			}
			done := e.complete(chain[i])
			if i+1 < levels {
				next := chain[i+1]
				at := e.await(fmt.Sprintf("level %d eligible", i+1), func() bool { return e.eligible(next) })
				lat = append(lat, at.Sub(done))
				if i+2 < levels && e.eligible(chain[i+2]) {
					t.Fatalf("level %d eligible before level %d completed", i+2, i+1)
				}
			}
		}
	}
	t.Logf("DAG per-level latency (completion of level k → level k+1 eligible), %d samples: p50=%s p99=%s max=%s",
		len(lat), percentile(lat, 0.5), percentile(lat, 0.99), slices.Max(lat))
}

func unresolved(e *flowEnv, eid model.ExecutionID) int64 {
	n, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Scard().Key(model.KeysFor(eid).DepsUnresolved()).Build()).AsInt64()
	return n
}

// A failed upstream makes its whole downstream subtree impossible: every
// descendant is skipped through the dispatcher's recursion (and the
// skipped completions it publishes).
func TestFlowEngineImpossibleSkipsSubtree(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: dispatchers, listener: true})
	flow := e.flow()
	m := e.members(flow, 6)
	a, b, c, d, x, y := m[0], m[1], m[2], m[3], m[4], m[5]
	// a→b→c→d, a→x, and y→d (y stays runnable: d is skipped anyway).
	e.edges(flow, [2]model.ExecutionID{a, b}, [2]model.ExecutionID{b, c}, [2]model.ExecutionID{c, d},
		[2]model.ExecutionID{a, x}, [2]model.ExecutionID{y, d})
	e.fail(a)
	e.await("subtree skipped", func() bool {
		for _, s := range []model.ExecutionID{b, c, d, x} {
			if e.core(s, "terminal_outcome") != "skipped" {
				return false
			}
		}
		return true
	})
	if e.core(y, "lifecycle_phase") == "terminal" {
		t.Fatal("y (no failed upstream) was touched")
	}
	for _, s := range []model.ExecutionID{b, c, d, x} {
		if e.eligible(s) || e.core(s, "public_state") != "skipped" {
			t.Fatalf("%s: public_state %q", s, e.core(s, "public_state"))
		}
	}
}

// An AnyOf group with cancel_remaining over 2,000 siblings: the first
// success makes the downstream eligible and the edge-cancel dispatcher
// cancels all 1,999 losers, then drains the group. FlowFabric's
// dispatcher cancels only the first 1,024 before draining, stranding 975
// running siblings (engine spec §15.9); this test fails on that.
func TestFlowEngineAnyOfCancelRemaining2000(t *testing.T) {
	e := setupFlowEnv(t, flowOpts{plugins: dispatchers, listener: true})
	flow := e.flow()
	const n = 2000
	m := e.members(flow, n+1)
	down, ups := m[n], m[:n]
	if _, err := e.c.SetEdgeGroupPolicy(e.ctx, flow, down, valkey.EdgeGroupAnyOf, valkey.OnSatisfiedCancelRemain, 0, 0); err != nil {
		t.Fatal(err)
	}
	pairs := make([][2]model.ExecutionID, n)
	for i, u := range ups {
		pairs[i] = [2]model.ExecutionID{u, down}
	}
	e.edges(flow, pairs...)
	e.complete(ups[0])
	e.await("downstream eligible", func() bool { return e.eligible(down) })
	pending := model.KeysOn(e.c.Partitions().FlowPartition(flow)).PendingCancelGroups()
	e.await("all losers cancelled and group drained", func() bool {
		card, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Scard().Key(pending).Build()).AsInt64()
		return card == 0 && e.core(ups[n-1], "terminal_outcome") == "cancelled"
	})
	// Every loser was cancelled by the dispatcher, for the group.
	raw := e.c.Raw()
	cmds := make(valkeygo.Commands, 0, n-1)
	for _, u := range ups[1:] {
		cmds = append(cmds, raw.B().Hmget().Key(model.KeysFor(u).Core()).Field("terminal_outcome", "cancellation_reason").Build())
	}
	cancelled := 0
	for i, r := range raw.DoMulti(e.ctx, cmds...) {
		f, err := r.AsStrSlice()
		if err != nil || len(f) != 2 {
			t.Fatalf("read %s: %v", ups[i+1], err)
		}
		if f[0] == "cancelled" && f[1] == "sibling_quorum_satisfied" {
			cancelled++
		}
	}
	if cancelled != n-1 {
		t.Fatalf("cancelled %d of %d losers for sibling_quorum_satisfied", cancelled, n-1)
	}
	if e.core(ups[0], "terminal_outcome") != "success" {
		t.Fatal("winner touched")
	}
}

// A quorum group (2 of 3) with let_run: two successes make the downstream
// eligible; the third sibling is not cancelled and its later completion
// does not fire the group again.
func TestFlowEngineQuorumLetRun(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: dispatchers, listener: true})
	flow := e.flow()
	m := e.members(flow, 4)
	down, ups := m[3], m[:3]
	if _, err := e.c.SetEdgeGroupPolicy(e.ctx, flow, down, valkey.EdgeGroupQuorum, valkey.OnSatisfiedLetRun, 2, 0); err != nil {
		t.Fatal(err)
	}
	e.edges(flow, [2]model.ExecutionID{ups[0], down}, [2]model.ExecutionID{ups[1], down}, [2]model.ExecutionID{ups[2], down})
	e.complete(ups[0])
	e.await("first edge resolved", func() bool { return unresolved(e, down) == 2 })
	if e.eligible(down) {
		t.Fatal("eligible after 1 of 2")
	}
	e.complete(ups[1])
	e.await("downstream eligible", func() bool { return e.eligible(down) })
	if e.core(ups[2], "lifecycle_phase") == "terminal" {
		t.Fatal("let_run sibling was cancelled")
	}
	e.complete(ups[2])
	e.await("third edge resolved", func() bool { return unresolved(e, down) == 0 })
	if !e.eligible(down) {
		t.Fatal("downstream left eligible after the third completion")
	}
	fk := model.FlowKeysFor(e.c.Partitions().FlowPartition(flow), flow)
	g, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Hgetall().Key(fk.EdgeGroup(down)).Build()).AsStrMap()
	if g["group_state"] != "satisfied" || g["succeeded"] != "3" || g["cancel_siblings_pending_flag"] != "" {
		t.Fatalf("edge group = %v", g)
	}
}

// The dispatcher stamps edges with the now host function (server time by
// default), never the engine host's wall clock: FlowFabric's router used
// the local clock (spec §15.13). With the plugins' clock pinned, the
// stamp is exactly that value.
func TestDependencyDispatcherUsesPluginClock(t *testing.T) {
	t.Parallel()
	const pinned = 1_234_567
	e := setupFlowEnv(t, flowOpts{plugins: []string{"dependency"}, listener: true,
		now: func(context.Context) (int64, error) { return pinned, nil }})
	flow := e.flow()
	m := e.members(flow, 2)
	e.edges(flow, [2]model.ExecutionID{m[0], m[1]})
	e.complete(m[0])
	e.await("child eligible", func() bool { return e.eligible(m[1]) })
	edges, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Smembers().Key(model.KeysFor(m[1]).DepsAllEdges()).Build()).AsStrSlice()
	if len(edges) != 1 {
		t.Fatalf("edges %v", edges)
	}
	dep, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Hgetall().Key(model.KeysFor(m[1]).DepEdge(edges[0])).Build()).AsStrMap()
	if dep["last_resolved_at"] != strconv.Itoa(pinned) {
		t.Fatalf("dep edge = %v, want last_resolved_at %d", dep, pinned)
	}
}

// dispatchLog is a host.DispatchObserver keeping every record.
type dispatchLog struct {
	mu   sync.Mutex
	recs []host.DispatchRecord
}

func (l *dispatchLog) SweepDone(host.SweepEvent) {}

func (l *dispatchLog) DispatchDone(r host.DispatchRecord) {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
}

// A dispatcher call that resolved an edge is timed by stage: the listener
// received the message, the call started, its FCALL batch went out and
// came back, the call returned — in that order, and the DispatchObserver
// sees the same record.
func TestDispatchRecordStages(t *testing.T) {
	t.Parallel()
	obs := &dispatchLog{}
	e := setupFlowEnv(t, flowOpts{plugins: []string{"dependency"}, listener: true, observer: obs})
	flow := e.flow()
	m := e.members(flow, 2)
	e.edges(flow, [2]model.ExecutionID{m[0], m[1]})
	e.complete(m[0])
	var rec host.DispatchRecord
	for rec.Result.Acted == 0 {
		select {
		case rec = <-e.sig.Dispatched.C():
		case <-time.After(60 * time.Second):
			t.Fatal("no dispatcher call resolved the edge")
		}
	}
	times := []time.Time{rec.Received, rec.Start, rec.FCallSent, rec.FCallDone, rec.End}
	for i, at := range times {
		if at.IsZero() || i > 0 && at.Before(times[i-1]) {
			t.Fatalf("record times out of order or missing (received, start, fcall sent, fcall done, end): %v", times)
		}
	}
	var names []string
	for _, st := range rec.Stages() {
		names = append(names, st.Stage)
		if st.Duration < 0 {
			t.Fatalf("stage %s of %s", st.Stage, st.Duration)
		}
	}
	if want := []string{host.StageHandOff, host.StageCall, host.StageFCall, host.StageReturn}; !slices.Equal(names, want) {
		t.Fatalf("stages %v, want %v", names, want)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if !slices.ContainsFunc(obs.recs, func(r host.DispatchRecord) bool { return r.Batch == rec.Batch && r.FCallSent.Equal(rec.FCallSent) }) {
		t.Fatalf("the observer did not see batch %d: %+v", rec.Batch, obs.recs)
	}
}

// A completion nobody heard (listener off) is repaired by
// dependency_reconciler on its sweep.
func TestDependencyReconcilerRepairsLostCompletion(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: []string{"dependency", "dependency_reconciler"}, listener: false,
		config: map[string]host.PluginConfig{"dependency_reconciler": {Interval: 200 * time.Millisecond}}})
	flow := e.flow()
	m := e.members(flow, 3)
	e.edges(flow, [2]model.ExecutionID{m[0], m[1]}, [2]model.ExecutionID{m[1], m[2]})
	e.complete(m[0])
	valkeytest.Eventually(t, 20*time.Second, "reconciler resolves the lost completion", func() bool { return e.eligible(m[1]) })
	st, _ := e.h.Plugin("dependency")
	if st.Calls != 0 {
		t.Fatalf("dispatcher ran %d times without a listener", st.Calls)
	}
	valkeytest.Eventually(t, 30*time.Second, "reconciler counts the resolution", func() bool {
		rec, _ := e.h.Plugin("dependency_reconciler")
		return rec.Totals.Acted > 0
	})
	if e.eligible(m[2]) {
		t.Fatal("grandchild eligible")
	}
}

// The listener survives the loss of its connection (CLIENT KILL of its
// own subscriber): it resubscribes, sweeps dependency_reconciler at once
// to close the gap, and completions flow again.
func TestCompletionListenerResubscribes(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: []string{"dependency", "dependency_reconciler"}, listener: true,
		config: map[string]host.PluginConfig{"dependency_reconciler": {Interval: time.Hour}}})
	db := clientDB(t, e.c)
	list, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().ClientList().TypePubsub().Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " db="+strconv.Itoa(db)+" ") && strings.Contains(line, " name="+host.ListenerClientName+" ") {
			id = strings.TrimPrefix(strings.Fields(line)[0], "id=")
		}
	}
	if id == "" {
		t.Fatalf("subscriber of db %d not found in\n%s", db, list)
	}
	flow := e.flow()
	m := e.members(flow, 2)
	e.edges(flow, [2]model.ExecutionID{m[0], m[1]})
	if err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Arbitrary("CLIENT", "KILL", "ID", id).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if n := e.sig.Subscribed.WaitOrTimeout(t); n != 2 {
		t.Fatalf("subscription count %d after kill", n)
	}
	if got := e.sig.Resynced.WaitOrTimeout(t); got != "dependency_reconciler" {
		t.Fatalf("resynced %q", got)
	}
	e.complete(m[0])
	e.await("completion after resubscribe dispatched", func() bool { return e.eligible(m[1]) })
	if !e.logs.Contains("completion listener lost its connection") {
		t.Fatal("no reconnect log")
	}
}

// The listener outlives a server restart: the subscription breaks, the
// listener retries until the server is back, resubscribes, and the flow
// engine works again on the new (empty) server.
func TestCompletionListenerSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	s := valkeytest.NewServer(t)
	e := setupFlowEnv(t, flowOpts{plugins: []string{"dependency"}, listener: true, url: s.URL()})
	if err := s.Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.sig.Subscribed.WaitOrTimeout(t); n != 2 {
		t.Fatalf("subscription count %d after restart", n)
	}
	if _, err := e.c.EnsureLibrary(e.ctx); err != nil {
		t.Fatal(err)
	}
	flow := e.flow()
	m := e.members(flow, 2)
	e.edges(flow, [2]model.ExecutionID{m[0], m[1]})
	e.complete(m[0])
	e.await("child eligible after restart", func() bool { return e.eligible(m[1]) })
}

// A completion handled after its execution's core is gone (trimmed) still
// resolves edges with the message's outcome: FlowFabric re-read an empty
// terminal_outcome, treated it as "not success", and skipped the child of
// a member that had succeeded (engine spec §15.14).
func TestDependencyDispatcherUsesMessageOutcomeWhenCoreIsGone(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: []string{"dependency"}, listener: true})
	flow := e.flow()
	m := e.members(flow, 2)
	e.edges(flow, [2]model.ExecutionID{m[0], m[1]})
	e.do("DEL", model.KeysFor(m[0]).Core())
	msg := fmt.Sprintf(`{"execution_id":%q,"flow_id":%q,"outcome":"success"}`, m[0], flow)
	e.do("PUBLISH", "ff:dag:completions", msg)
	e.await("child eligible", func() bool { return e.eligible(m[1]) })
	if got := e.core(m[1], "terminal_outcome"); got == "skipped" {
		t.Fatal("child skipped")
	}
}
