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

// claim grants and claims eid for worker w.
func (f *scannerFixture) claim(eid model.ExecutionID, w string, leaseMs, attemptTimeoutMs int64) *valkey.GrantAndClaimResult {
	f.t.Helper()
	r, err := f.c.IssueGrantAndClaim(f.ctx, &valkey.IssueGrantAndClaimParams{
		ExecutionID: eid, WorkerID: w, WorkerInstanceID: w + "-1", Lane: "default",
		LeaseID: model.NewUUID().String(), LeaseTTLMs: leaseMs, AttemptID: model.NewUUID().String(),
		AttemptTimeoutMs: attemptTimeoutMs,
	})
	if err != nil {
		f.t.Fatalf("ff_issue_grant_and_claim: %v", err)
	}
	return r
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
	var st host.PluginStatus
	valkeytest.Eventually(f.t, 15*time.Second, name+" counted its work", func() bool {
		st, _ = f.host.Plugin(name)
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
// count.
func TestScannersOnValkey(t *testing.T) {
	t.Parallel()
	f := newScannerFixture(t, host.TimerConfig{}, map[string]host.PluginConfig{
		"retention_trimmer": {Interval: 100 * time.Millisecond, Config: map[string]string{"lanes": "default"}},
	})
	f.start(t)
	for _, name := range host.DefaultPlugins {
		if st, ok := f.host.Plugin(name); !ok || st.State != host.StateRunning {
			t.Fatalf("%s is not running: %+v", name, st)
		}
	}

	t.Run("AttemptTimeout", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "a"})
		f.claim(eid, "w-at", 60_000, 200)
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
		valkeytest.Eventually(t, 5*time.Second, "inconsistency logged", func() bool {
			return f.logs.Contains("execution " + string(eid) + " is missing from its expected index")
		})
	})

	t.Run("LeaseExpiry", func(t *testing.T) {
		f := *f
		f.t = t
		eid := f.create(&valkey.CreateExecutionParams{Namespace: "le"})
		f.claim(eid, "w-le", 200, 0)
		f.waitCore(eid, "lease marked expired", func(c map[string]string) bool { return c["ownership_state"] == "lease_expired_reclaimable" })
		// fabric drops the entry once marked (FlowFabric leaves it, re-marks
		// and re-counts it every sweep, and 50 of them starve newer ones).
		pk := model.KeysOn(eid.Partition())
		valkeytest.Eventually(t, 5*time.Second, "lease_expiry entry cleared", func() bool { return !f.zmember(pk.LeaseExpiry(), string(eid)) })
		st := f.waitActed("lease_expiry", 1)
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
		// Counted once, not once per sweep.
		later, _ := f.host.Plugin("lease_expiry")
		if later.Totals.Acted > st.Totals.Acted+1 {
			t.Fatalf("lease_expiry keeps counting the marked lease: %d then %d", st.Totals.Acted, later.Totals.Acted)
		}
	})
}
