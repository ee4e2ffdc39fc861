package host_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

func fast(names ...string) map[string]host.PluginConfig {
	out := map[string]host.PluginConfig{}
	for _, n := range names {
		out[n] = host.PluginConfig{Interval: 100 * time.Millisecond}
	}
	return out
}

func (e *flowEnv) hgetall(key string) map[string]string {
	m, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *flowEnv) do(args ...string) {
	e.t.Helper()
	if err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Arbitrary(args...).Build()).Error(); err != nil {
		e.t.Fatalf("%v: %v", args, err)
	}
}

// budget_reset zeroes the usage of a budget whose reset time came, and
// reschedules it; budget_reconciler sets and clears breached_at on a
// non-resetting budget from its usage against its hard limits, and drops
// dangling policy-index entries.
func TestBudgetScannersActOnRealState(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: []string{"budget_reset", "budget_reconciler"}, config: fast("budget_reset", "budget_reconciler")})
	resetting, fixed := model.NewUUID(), model.NewUUID()
	for _, p := range []*valkey.CreateBudgetParams{
		{BudgetID: resetting, ScopeType: "flow", ScopeID: "s", EnforcementMode: "strict", OnHardLimit: "block", OnSoftLimit: "warn",
			ResetIntervalMs: 300, Dimensions: []valkey.BudgetDimension{{Name: "tokens", Hard: 100, Soft: 50}}},
		{BudgetID: fixed, ScopeType: "flow", ScopeID: "s", EnforcementMode: "strict", OnHardLimit: "block", OnSoftLimit: "warn",
			Dimensions: []valkey.BudgetDimension{{Name: "tokens", Hard: 10, Soft: 5}}},
	} {
		if _, err := e.c.CreateBudget(e.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	rk := model.BudgetKeysFor(flowParts.BudgetPartition(resetting), resetting)
	fk := model.BudgetKeysFor(flowParts.BudgetPartition(fixed), fixed)
	e.do("HSET", rk.Usage(), "tokens", "70")
	valkeytest.Eventually(t, 20*time.Second, "resetting budget reset", func() bool {
		u := e.hgetall(rk.Usage())
		d := e.hgetall(rk.Definition())
		n, _ := strconv.Atoi(d["reset_count"])
		return u["tokens"] == "0" && n >= 1
	})
	next, err := e.c.Raw().Do(e.ctx, e.c.Raw().B().Zscore().Key(rk.Resets()).Member(resetting.String()).Build()).AsFloat64()
	if err != nil || next <= 0 {
		t.Fatalf("budget not rescheduled: %v %v", next, err)
	}

	// Over the hard limit (usage drifted to 15 > 10): breached_at appears.
	e.do("HSET", fk.Usage(), "tokens", "15")
	valkeytest.Eventually(t, 20*time.Second, "breached_at set", func() bool { return e.hgetall(fk.Usage())["breached_at"] != "" })
	e.do("HSET", fk.Usage(), "tokens", "3")
	valkeytest.Eventually(t, 20*time.Second, "breached_at cleared", func() bool {
		_, ok := e.hgetall(fk.Usage())["breached_at"]
		return !ok
	})
	// A dangling index entry (no definition) is pruned.
	ghost := model.NewUUID()
	gk := model.BudgetKeysFor(flowParts.BudgetPartition(ghost), ghost)
	e.do("SADD", gk.Policies(), ghost.String())
	valkeytest.Eventually(t, 20*time.Second, "ghost pruned", func() bool {
		ok, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Sismember().Key(gk.Policies()).Member(ghost.String()).Build()).AsBool()
		return !ok
	})
}

// quota_reconciler trims the request window to the policy's window and
// rewrites a drifted concurrency counter to the live admissions (members
// of admitted_set whose guard still exists), dropping dead members.
func TestQuotaReconcilerActsOnRealState(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: []string{"quota_reconciler"}, config: fast("quota_reconciler")})
	q := model.NewUUID()
	if _, err := e.c.CreateQuotaPolicy(e.ctx, &valkey.CreateQuotaPolicyParams{QuotaID: q, WindowSeconds: 60, MaxRequestsPerWindow: 100, MaxConcurrent: 5}); err != nil {
		t.Fatal(err)
	}
	k := model.QuotaKeysFor(flowParts.QuotaPartition(q), q)
	live, dead := "{fp:1}:11111111-1111-4111-8111-111111111111", "{fp:1}:22222222-2222-4222-8222-222222222222"
	now, err := e.c.ServerTime(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	window := k.Window("requests_per_window")
	// Written in one script so no sweep sees half of it.
	e.do("EVAL", `redis.call('ZADD', KEYS[1], ARGV[1], 'old', ARGV[2], 'fresh')
redis.call('SET', KEYS[3], '1', 'PX', 60000)
redis.call('SADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('SET', KEYS[4], '7')
return 1`, "4", window, k.AdmittedSet(), k.Admitted(model.ExecutionID(live)), k.Concurrency(),
		strconv.FormatInt(now-120_000, 10), strconv.FormatInt(now, 10), live, dead)
	// A sweep that began before the EVAL may reconcile the counter after
	// trimming a still-empty window, so wait for a sweep that did both.
	var ms, w []string
	valkeytest.Eventually(t, 20*time.Second, "concurrency, admitted_set and window reconciled", func() bool {
		v, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Get().Key(k.Concurrency()).Build()).ToString()
		ms, _ = e.c.Raw().Do(e.ctx, e.c.Raw().B().Smembers().Key(k.AdmittedSet()).Build()).AsStrSlice()
		w, _ = e.c.Raw().Do(e.ctx, e.c.Raw().B().Zrange().Key(window).Min("0").Max("-1").Build()).AsStrSlice()
		return v == "1" && len(ms) == 1 && len(w) == 1
	})
	if ms[0] != live {
		t.Fatalf("admitted_set = %v, want only the live admission", ms)
	}
	if w[0] != "fresh" {
		t.Fatalf("window = %v, want only the fresh entry", w)
	}
}

// flow_projector writes the summary of a flow from its members' states
// and prunes a deleted flow from the index; edge_cancel_reconciler drops
// a stale pending group; cancel_reconciler cancels and acks the members
// of a cancelled flow once its grace passed.
func TestFlowScannersActOnRealState(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: []string{"flow_projector", "edge_cancel_reconciler", "cancel_reconciler"},
		config: fast("flow_projector", "edge_cancel_reconciler", "cancel_reconciler")})
	flow := e.flow()
	m := e.members(flow, 3)
	e.complete(m[0])
	fp := flowParts.FlowPartition(flow)
	fk := model.FlowKeysFor(fp, flow)
	valkeytest.Eventually(t, 20*time.Second, "summary projected", func() bool {
		s := e.hgetall(fk.Summary())
		return s["total_members"] == "3" && s["members_completed"] == "1" && s["members_waiting"] == "2" && s["public_flow_state"] == "open"
	})
	// A flow whose core is gone leaves the index.
	ghost := model.NewUUID()
	gidx := model.KeysOn(flowParts.FlowPartition(ghost)).FlowIndex()
	e.do("SADD", gidx, ghost.String())
	valkeytest.Eventually(t, 20*time.Second, "ghost flow pruned", func() bool {
		ok, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Sismember().Key(gidx).Member(ghost.String()).Build()).AsBool()
		return !ok
	})
	// A pending group without an edge group is stale.
	pending := model.KeysOn(fp).PendingCancelGroups()
	e.do("SADD", pending, flow.String()+"|"+string(m[1]))
	valkeytest.Eventually(t, 20*time.Second, "stale group dropped", func() bool {
		n, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Scard().Key(pending).Build()).AsInt64()
		return n == 0
	})
	// Cancel the flow with no grace: the reconciler cancels the two
	// live members and acks them; the flow leaves the backlog.
	if _, err := e.c.CancelFlow(e.ctx, flow, "operator_stop", "cancel_all", 0, 0); err != nil {
		t.Fatal(err)
	}
	valkeytest.Eventually(t, 20*time.Second, "members cancelled", func() bool {
		return e.core(m[1], "terminal_outcome") == "cancelled" && e.core(m[2], "terminal_outcome") == "cancelled"
	})
	valkeytest.Eventually(t, 20*time.Second, "backlog drained", func() bool {
		n, _ := e.c.Raw().Do(e.ctx, e.c.Raw().B().Zcard().Key(model.KeysOn(fp).CancelBacklog()).Build()).AsInt64()
		return n == 0
	})
	if e.core(m[0], "terminal_outcome") != "success" {
		t.Fatal("completed member touched")
	}
}

// flow_projector reads the members of a page of flows in one batch: five
// flows over four flow partitions (two share a page at least), each with
// its own member count and completed members, and a member whose core is
// gone, get each their own summary.
func TestFlowProjectorSummariesPerFlow(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: []string{"flow_projector"}, config: fast("flow_projector")})
	type want struct {
		flow                      model.UUID
		total, completed, unknown int
	}
	var wants []want
	for i := 0; i < 5; i++ {
		flow := e.flow()
		m := e.members(flow, 2+i)
		for _, eid := range m[:i%3] {
			e.complete(eid)
		}
		w := want{flow: flow, total: 2 + i, completed: i % 3}
		if i == 3 { // a member whose core is gone reads "unknown"
			e.do("DEL", model.KeysFor(m[len(m)-1]).Core())
			w.unknown = 1
		}
		wants = append(wants, w)
	}
	for _, w := range wants {
		fk := model.FlowKeysFor(flowParts.FlowPartition(w.flow), w.flow)
		waiting := w.total - w.completed - w.unknown
		valkeytest.Eventually(t, 20*time.Second, "summary of "+w.flow.String(), func() bool {
			s := e.hgetall(fk.Summary())
			return s["total_members"] == strconv.Itoa(w.total) && s["sampled_members"] == strconv.Itoa(w.total) &&
				s["members_completed"] == strconv.Itoa(w.completed) && s["members_waiting"] == strconv.Itoa(waiting) &&
				s["members_unknown"] == "" && s["public_flow_state"] == "open"
		})
	}
}

// dependency_reconciler rotates through a blocked set larger than its
// batch: executions blocked for long at the head of the set (their
// upstream still runs) do not starve a later one whose upstream finished
// unheard. FlowFabric always reads the lowest-score batch (engine spec
// §15.3) and never repairs the target here.
func TestDependencyReconcilerNoHeadOfLineStarvation(t *testing.T) {
	t.Parallel()
	e := setupFlowEnv(t, flowOpts{plugins: []string{"dependency_reconciler"},
		config: map[string]host.PluginConfig{"dependency_reconciler": {Interval: 100 * time.Millisecond, BatchSize: 5}}})
	flow := e.flow()
	m := e.members(flow, 9)
	running, stuck, done, target := m[0], m[1:7], m[7], m[8]
	for _, s := range stuck {
		e.edges(flow, [2]model.ExecutionID{running, s})
	}
	e.edges(flow, [2]model.ExecutionID{done, target})
	e.complete(done) // nobody listens: only the reconciler can resolve it
	valkeytest.Eventually(t, 20*time.Second, "target resolved past the stuck head", func() bool { return e.eligible(target) })
	for _, s := range stuck {
		if e.eligible(s) {
			t.Fatalf("%s eligible with its upstream running", s)
		}
	}
}
