package host_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// scannerFixture is one host running the default plugin set from
// bin/plugins (the .wasm builds) on a fresh database, every scanner on a
// 100 ms interval.
type scannerFixture struct {
	*testBundle
	c   *valkey.Client
	ctx context.Context
	t   *testing.T
}

func newScannerFixture(t *testing.T, timers host.TimerConfig, extra map[string]host.PluginConfig) *scannerFixture {
	t.Helper()
	plugins := map[string]host.PluginConfig{}
	for _, name := range host.DefaultPlugins {
		plugins[name] = host.PluginConfig{Interval: 100 * time.Millisecond}
	}
	for k, v := range extra {
		plugins[k] = v
	}
	b := setup(t, setupOpts{store: true, noStart: true, plugins: plugins, timers: timers})
	for _, name := range host.DefaultPlugins {
		copyFile(t, fixture(t, name), filepath.Join(b.dir, name+".wasm"))
	}
	return &scannerFixture{testBundle: b, c: b.backend(t), ctx: valkeytest.Context(t, 60*time.Second), t: t}
}

func (f *scannerFixture) now() int64 {
	f.t.Helper()
	now, err := f.c.ServerTime(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	return now
}

func (f *scannerFixture) create(p *valkey.CreateExecutionParams) model.ExecutionID {
	f.t.Helper()
	if p.ExecutionID == "" {
		p.ExecutionID = model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(len(p.Namespace) % 4)}, model.NewUUID())
	}
	if p.LaneID == "" {
		p.LaneID = "default"
	}
	if p.ExecutionKind == "" {
		p.ExecutionKind = "test"
	}
	if p.Namespace == "" {
		p.Namespace = "ns"
	}
	if _, err := f.c.CreateExecution(f.ctx, p); err != nil {
		f.t.Fatalf("ff_create_execution: %v", err)
	}
	return p.ExecutionID
}

// claim grants and claims eid for worker w; it returns the fence and the
// attempt index.
func (f *scannerFixture) claim(eid model.ExecutionID, w string, leaseMs, attemptTimeoutMs int64) (valkey.LeaseFence, int) {
	f.t.Helper()
	attempt := model.NewUUID().String()
	r, err := f.c.IssueGrantAndClaim(f.ctx, &valkey.IssueGrantAndClaimParams{
		ExecutionID: eid, WorkerID: w, WorkerInstanceID: w + "-1", Lane: "default",
		LeaseID: model.NewUUID().String(), LeaseTTLMs: leaseMs, AttemptID: attempt,
		AttemptTimeoutMs: attemptTimeoutMs,
	})
	if err != nil {
		f.t.Fatalf("ff_issue_grant_and_claim: %v", err)
	}
	return valkey.LeaseFence{LeaseID: r.LeaseID, LeaseEpoch: r.LeaseEpoch, AttemptID: attempt}, r.AttemptIndex
}

// keystore installs a waitpoint HMAC secret on eid's partition.
func (f *scannerFixture) keystore(eid model.ExecutionID) {
	f.t.Helper()
	raw := f.c.Raw()
	key := model.KeysOn(eid.Partition()).WaitpointHMACSecrets()
	if err := raw.Do(f.ctx, raw.B().Hset().Key(key).FieldValue().FieldValue("current_kid", "k1").FieldValue("secret:k1", "00112233445566778899aabbccddeeff").Build()).Error(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *scannerFixture) hash(key string) map[string]string {
	f.t.Helper()
	raw := f.c.Raw()
	m, err := raw.Do(f.ctx, raw.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *scannerFixture) core(eid model.ExecutionID) map[string]string {
	f.t.Helper()
	core, err := f.c.ExecutionCore(f.ctx, eid)
	if err != nil {
		f.t.Fatalf("core of %s: %v", eid, err)
	}
	return core
}

func (f *scannerFixture) waitCore(eid model.ExecutionID, what string, cond func(map[string]string) bool) map[string]string {
	f.t.Helper()
	var core map[string]string
	valkeytest.Eventually(f.t, 15*time.Second, string(eid)+" "+what, func() bool {
		core = f.core(eid)
		return cond(core)
	})
	return core
}

func (f *scannerFixture) waitActed(name string, n uint32) host.PluginStatus {
	f.t.Helper()
	return waitActed(f.t, f.host, name, n)
}

// waitActed polls until the plugin's totals count at least n actions and
// returns its status then. A plugin's work is visible in the store before
// the call that did it returns and the host adds it to the totals, so a
// test that saw the effect reads the count through this.
func waitActed(t *testing.T, h *host.Host, name string, n uint32) host.PluginStatus {
	t.Helper()
	var st host.PluginStatus
	valkeytest.Eventually(t, 15*time.Second, name+" counted its work", func() bool {
		st, _ = h.Plugin(name)
		return st.Totals.Acted >= n
	})
	return st
}

func (f *scannerFixture) zmember(key, member string) bool {
	f.t.Helper()
	return in(f.t, f.c, key, model.ExecutionID(member))
}

func (f *scannerFixture) exists(key string) bool {
	f.t.Helper()
	raw := f.c.Raw()
	n, err := raw.Do(f.ctx, raw.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		f.t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

// TestScannersOnValkey drives every default scanner through its loaded
// .wasm on a real server: each subtest creates the state a scanner acts on
// with the real ff_* functions and waits for the scanner's effect and
// count. Not parallel: nine plugins load at once.
func TestScannersOnValkey(t *testing.T) {
	f := newScannerFixture(t, host.TimerConfig{}, map[string]host.PluginConfig{
		"retention_trimmer": {Interval: 100 * time.Millisecond, Config: map[string]string{"lanes": "default"}},
		// The fixture's client routes budgets and quotas over the default
		// 32 partitions while the host runs 2: the operator entries tell
		// unblock where the client wrote them.
		"unblock": {Interval: 100 * time.Millisecond, Config: map[string]string{"budget_partitions": "32", "quota_partitions": "32"}},
	})
	// Nine Go modules instantiate at start: ~3 s each under -race on a
	// loaded machine, so this start gets more than setup's 60 s.
	if err := f.host.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.host.Stop)
	select {
	case <-f.host.Started():
	case <-time.After(4 * time.Minute):
		t.Fatal("host did not load the default plugins within 4 minutes")
	}
	for _, name := range host.DefaultPlugins {
		if st, ok := f.host.Plugin(name); !ok || st.State != host.StateRunning {
			t.Fatalf("%s is not running: %+v", name, st)
		}
	}
	// The subtests' deadline starts now: loading may take minutes.
	f.ctx = valkeytest.Context(t, 3*time.Minute)

	t.Run("AttemptTimeout", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "a"})
		_, _ = f.claim(eid, "w-at", 60_000, 200)
		core := f.waitCore(eid, "expired by attempt timeout", func(c map[string]string) bool { return c["lifecycle_phase"] == "terminal" })
		if core["terminal_outcome"] != "expired" {
			t.Fatalf("core = %v", core)
		}
		pk := model.KeysOn(eid.Partition())
		if f.zmember(pk.AttemptTimeout(), string(eid)) || f.zmember(pk.LaneActive("default"), string(eid)) || !f.zmember(pk.LaneTerminal("default"), string(eid)) {
			t.Fatal("indexes not cleaned by ff_expire_execution")
		}
		f.waitActed("attempt_timeout", 1)
	})

	t.Run("DelayedPromoter", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "dp", DelayUntil: f.now() + 300})
		f.waitCore(eid, "promoted", func(c map[string]string) bool { return c["eligibility_state"] == "eligible_now" })
		pk := model.KeysOn(eid.Partition())
		if f.zmember(pk.LaneDelayed("default"), string(eid)) || !f.zmember(pk.LaneEligible("default"), string(eid)) {
			t.Fatal("not moved from delayed to eligible")
		}
		f.waitActed("delayed_promoter", 1)
	})

	t.Run("ExecutionDeadline", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "ed", ExecutionDeadlineAt: f.now() + 200})
		core := f.waitCore(eid, "expired by deadline", func(c map[string]string) bool { return c["lifecycle_phase"] == "terminal" })
		if core["terminal_outcome"] != "expired" {
			t.Fatalf("core = %v", core)
		}
		if f.zmember(model.KeysOn(eid.Partition()).ExecutionDeadline(), string(eid)) {
			t.Fatal("still in execution_deadline")
		}
		f.waitActed("execution_deadline", 1)
	})

	t.Run("IndexReconciler", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "ir"})
		raw := f.c.Raw()
		if err := raw.Do(f.ctx, raw.B().Zrem().Key(model.KeysOn(eid.Partition()).LaneEligible("default")).Member(string(eid)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		f.waitActed("index_reconciler", 1)
		if !f.zmember(model.KeysOn(eid.Partition()).LaneEligible("default"), string(eid)) {
			t.Fatal("the removed index entry was not restored")
		}
	})

	t.Run("LeaseExpiry", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "le"})
		_, _ = f.claim(eid, "w-le", 200, 0)
		f.waitCore(eid, "lease marked expired", func(c map[string]string) bool { return c["ownership_state"] == "lease_expired_reclaimable" })
		// The entry stays for workers to find the reclaim; fabric does not
		// re-mark or re-count it every sweep (FlowFabric does).
		pk := model.KeysOn(eid.Partition())
		if !f.zmember(pk.LeaseExpiry(), string(eid)) {
			t.Fatal("the marked lease left lease_expiry: no worker can find it to reclaim")
		}
		st := f.waitActed("lease_expiry", 1)
		calls := f.callsOf("lease_expiry")
		valkeytest.Eventually(t, 30*time.Second, "two more sweeps", func() bool { return f.callsOf("lease_expiry") >= calls+8 })
		// Counted once, not once per sweep: read before the reclaim below,
		// whose new lease a sweep that read the index just before it (and
		// the core just after) would find not yet due and count as an
		// answered call.
		later, _ := f.host.Plugin("lease_expiry")
		if later.Totals.Acted != st.Totals.Acted {
			t.Fatalf("lease_expiry keeps counting the marked lease: %d then %d", st.Totals.Acted, later.Totals.Acted)
		}
		// Another worker reclaims and completes it.
		if _, err := f.c.IssueReclaimGrant(f.ctx, &valkey.IssueClaimGrantParams{ExecutionID: eid, WorkerID: "w-2", WorkerInstanceID: "w-2-1", Lane: "default", GrantTTLMs: 10_000}); err != nil {
			t.Fatalf("reclaim grant: %v", err)
		}
		cl, err := f.c.ReclaimExecution(f.ctx, &valkey.ReclaimExecutionParams{ExecutionID: eid, WorkerID: "w-2", WorkerInstanceID: "w-2-1", LaneID: "default", LeaseTTLMs: 30_000})
		if err != nil {
			t.Fatalf("reclaim: %v", err)
		}
		if err := f.c.CompleteExecution(f.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: cl.Fence()}); err != nil {
			t.Fatalf("complete: %v", err)
		}
		if c := f.core(eid); c["terminal_outcome"] != "success" {
			t.Fatalf("core = %v", c)
		}
	})

	t.Run("PendingWaitpointExpiry", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "pw"})
		f.keystore(eid)
		_, att := f.claim(eid, "w-pw", 60_000, 0)
		wp := model.NewUUID().String()
		if _, err := f.c.CreatePendingWaitpoint(f.ctx, &valkey.CreatePendingWaitpointParams{ExecutionID: eid, AttemptIndex: att, WaitpointID: wp, WaitpointKey: "k-" + wp[:8], ExpiresAt: f.now() + 200}); err != nil {
			t.Fatalf("ff_create_pending_waitpoint: %v", err)
		}
		pk := model.KeysOn(eid.Partition())
		// A stale entry whose waitpoint hash is gone: FlowFabric re-calls
		// ff_close_waitpoint (waitpoint_not_found, no ZREM) every sweep.
		stale := model.NewUUID().String()
		raw := f.c.Raw()
		if err := raw.Do(f.ctx, raw.B().Zadd().Key(pk.PendingWaitpointExpiry()).ScoreMember().ScoreMember(1, stale).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		valkeytest.Eventually(t, 30*time.Second, "pending waitpoint closed", func() bool { return f.hash(pk.Waitpoint(wp))["state"] == "closed" })
		if h := f.hash(pk.Waitpoint(wp)); h["close_reason"] != "never_committed" {
			t.Fatalf("waitpoint = %v", h)
		}
		valkeytest.Eventually(t, 30*time.Second, "both entries gone from the index", func() bool {
			return !f.zmember(pk.PendingWaitpointExpiry(), wp) && !f.zmember(pk.PendingWaitpointExpiry(), stale)
		})
		f.waitActed("pending_wp_expiry", 2)
	})

	t.Run("RetentionTrimmer", func(t *testing.T) {
		f := *f
		f.t = t
		done := func(ns, policy string) model.ExecutionID {
			eid := f.create(&valkey.CreateExecutionParams{Namespace: ns, PolicyJSON: policy, Payload: "in"})
			fence, _ := f.claim(eid, "w-rt", 60_000, 0)
			if err := f.c.CompleteExecution(f.ctx, &valkey.CompleteExecutionParams{ExecutionID: eid, Fence: fence, Result: "out"}); err != nil {
				t.Fatalf("complete: %v", err)
			}
			return eid
		}
		// A retention below 24 h: FlowFabric's candidate window (now − 24 h)
		// never reaches it.
		short := done("rt", `{"stream_policy":{"retention_ttl_ms":150}}`)
		kept := done("rt", "")
		active := f.create(&valkey.CreateExecutionParams{Namespace: "rt"})
		k := model.KeysFor(short)
		pk := model.KeysOn(short.Partition())
		valkeytest.Eventually(t, 30*time.Second, "short-retention execution purged", func() bool { return !f.exists(k.Core()) })
		for _, key := range []string{k.Payload(), k.Result(), k.Policy(), k.Attempt(0), k.LeaseHistory(), k.Attempts()} {
			if f.exists(key) {
				t.Errorf("%s survived the purge", key)
			}
		}
		if f.zmember(pk.LaneTerminal("default"), string(short)) {
			t.Error("still in lane terminal")
		}
		raw := f.c.Raw()
		if ok, _ := raw.Do(f.ctx, raw.B().Sismember().Key(pk.AllExecutions()).Member(string(short)).Build()).AsBool(); ok {
			t.Error("still in all_executions")
		}
		f.waitActed("retention_trimmer", 1)
		for _, id := range []model.ExecutionID{kept, active} {
			if !f.exists(model.KeysFor(id).Core()) {
				t.Errorf("%s was trimmed", id)
			}
		}
	})

	t.Run("SuspensionTimeout", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "st"})
		f.keystore(eid)
		fence, att := f.claim(eid, "w-st", 60_000, 0)
		cond := `{"condition_type":"signal_set","required_signal_names":["go"],"signal_match_mode":"any","minimum_signal_count":1,"timeout_behavior":"fail","allow_operator_override":true}`
		if _, err := f.c.SuspendExecution(f.ctx, &valkey.SuspendParams{
			ExecutionID: eid, AttemptIndex: att, Fence: fence, SuspensionID: model.NewUUID().String(),
			WaitpointID: model.NewUUID().String(), WaitpointKey: "wk", ReasonCode: "waiting_for_signal", RequestedBy: "worker",
			TimeoutAt: f.now() + 200, ResumeConditionJSON: cond, ResumePolicyJSON: `{"resume_delay_ms":0}`, TimeoutBehavior: "fail",
		}); err != nil {
			t.Fatalf("ff_suspend_execution: %v", err)
		}
		core := f.waitCore(eid, "suspension timed out", func(c map[string]string) bool { return c["lifecycle_phase"] == "terminal" })
		if core["terminal_outcome"] != "failed" {
			t.Fatalf("core = %v", core)
		}
		if f.zmember(model.KeysOn(eid.Partition()).SuspensionTimeout(), string(eid)) {
			t.Fatal("still in suspension_timeout")
		}
		f.waitActed("suspension_timeout", 1)
	})

	t.Run("Unblock", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "ub"})
		bid := model.NewUUID()
		now := f.now()
		if _, err := f.c.CreateBudget(f.ctx, &valkey.CreateBudgetParams{BudgetID: bid, ScopeType: "tenant", ScopeID: "t", EnforcementMode: "strict",
			OnHardLimit: "block", OnSoftLimit: "warn", NowMs: now, Dimensions: []valkey.BudgetDimension{{Name: "tokens", Hard: 10}}}); err != nil {
			t.Fatalf("create budget: %v", err)
		}
		if _, err := f.c.ReportUsage(f.ctx, &valkey.ReportUsageParams{BudgetID: bid, NowMs: now, Deltas: []valkey.UsageDelta{{Dimension: "tokens", Delta: 10}}}); err != nil {
			t.Fatalf("report usage: %v", err)
		}
		raw := f.c.Raw()
		// Nothing in Lua writes budget_ids (datamodel trap 39): the caller does.
		if err := raw.Do(f.ctx, raw.B().Hset().Key(model.KeysFor(eid).Core()).FieldValue().FieldValue("budget_ids", bid.String()).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := f.c.BlockExecutionForAdmission(f.ctx, eid, "waiting_for_budget", "over", now); err != nil {
			t.Fatalf("block: %v", err)
		}
		// While the budget is at its hard limit, sweeps leave it blocked.
		calls := f.callsOf("unblock")
		valkeytest.Eventually(t, 30*time.Second, "two unblock sweeps", func() bool { return f.callsOf("unblock") >= calls+8 })
		if c := f.core(eid); c["eligibility_state"] != "blocked_by_budget" {
			t.Fatalf("unblocked while breached: %v", c)
		}
		if _, err := f.c.ResetBudget(f.ctx, bid, f.now()); err != nil {
			t.Fatalf("reset budget: %v", err)
		}
		f.waitCore(eid, "unblocked after the budget reset", func(c map[string]string) bool { return c["eligibility_state"] == "eligible_now" })
		pk := model.KeysOn(eid.Partition())
		if f.zmember(pk.LaneBlockedBudget("default"), string(eid)) || !f.zmember(pk.LaneEligible("default"), string(eid)) {
			t.Fatal("indexes not moved")
		}
		f.waitActed("unblock", 1)
	})
}
