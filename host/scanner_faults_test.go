package host_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// Tests of the upstream scanner faults fabric fixes (engine spec §15),
// through the loaded .wasm on a real server; each fails on FlowFabric's
// behaviour. Retention below 24 h is TestScannersOnValkey/RetentionTrimmer.

// TestLeaseExpiryBacklogDoesNotStarve runs the lease_expiry .wasm with a
// batch of 2 over leases that expire and are never reclaimed. FlowFabric
// re-marks the two oldest every sweep (counting each as processed) and
// never reaches a third; fabric marks each lease once, counts it once,
// leaves it in lease_expiry for a worker to reclaim and reaches newer
// expirations past them.
func TestLeaseExpiryBacklogDoesNotStarve(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, plugins: map[string]host.PluginConfig{
		"lease_expiry": {Interval: 100 * time.Millisecond, BatchSize: 2}}})
	copyFile(t, fixture(t, "lease_expiry"), filepath.Join(b.dir, "lease_expiry.wasm"))
	f := &scannerFixture{testBundle: b, c: b.backend(t), ctx: valkeytest.Context(t, 2*time.Minute), t: t}
	part := model.Partition{Family: model.FamilyFlow, Index: 0}
	pk := model.KeysOn(part)
	expiring := func() model.ExecutionID {
		eid := f.create(&valkey.CreateExecutionParams{ExecutionID: model.NewExecutionID(part, model.NewUUID())})
		f.claim(eid, "w-gone", 50, 0)
		return eid
	}
	marked := func(eid model.ExecutionID) {
		t.Helper()
		f.waitCore(eid, "lease marked expired", func(c map[string]string) bool { return c["ownership_state"] == "lease_expired_reclaimable" })
	}
	var ids []model.ExecutionID
	for range 3 {
		ids = append(ids, expiring())
	}
	f.start(t)
	for _, eid := range ids {
		marked(eid)
	}
	// A newer expiry behind three marked ones (a batch and a half).
	ids = append(ids, expiring())
	marked(ids[3])
	st := f.waitActed("lease_expiry", 4)
	calls := f.callsOf("lease_expiry")
	valkeytest.Eventually(t, 30*time.Second, "two more sweeps", func() bool { return f.callsOf("lease_expiry") >= calls+8 })
	later, _ := f.host.Plugin("lease_expiry")
	if st.Totals.Acted != 4 || later.Totals.Acted != 4 || later.Totals.Errors != 0 {
		t.Fatalf("acted %d then %d (errors %d), want 4: one mark per lease", st.Totals.Acted, later.Totals.Acted, later.Totals.Errors)
	}
	if later.Totals.Skipped <= st.Totals.Skipped {
		t.Fatalf("sweeps did not look at the marked leases: skipped %d then %d", st.Totals.Skipped, later.Totals.Skipped)
	}
	for _, eid := range ids {
		if !f.zmember(pk.LeaseExpiry(), string(eid)) {
			t.Fatalf("%s left lease_expiry: no worker can find it to reclaim", eid)
		}
	}
}

// TestLuaErrorReplyIsCounted: a {0, code} reply (ff_close_waitpoint on a
// waitpoint in no closable state answers waitpoint_not_open) is counted as
// an error, not as processed as FlowFabric counts it, and the failure
// tracker backs the item off.
func TestLuaErrorReplyIsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, plugins: map[string]host.PluginConfig{
		"pending_wp_expiry": {Interval: 100 * time.Millisecond}}})
	copyFile(t, fixture(t, "pending_wp_expiry"), filepath.Join(b.dir, "pending_wp_expiry.wasm"))
	f := &scannerFixture{testBundle: b, c: b.backend(t), ctx: valkeytest.Context(t, 2*time.Minute), t: t}
	part := model.Partition{Family: model.FamilyFlow, Index: 1}
	pk := model.KeysOn(part)
	eid := f.create(&valkey.CreateExecutionParams{ExecutionID: model.NewExecutionID(part, model.NewUUID())})
	wp := model.NewUUID().String()
	raw := f.c.Raw()
	if err := raw.Do(f.ctx, raw.B().Hset().Key(pk.Waitpoint(wp)).FieldValue().FieldValue("execution_id", string(eid)).FieldValue("state", "bogus").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(f.ctx, raw.B().Zadd().Key(pk.PendingWaitpointExpiry()).ScoreMember().ScoreMember(1, wp).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	var st host.PluginStatus
	valkeytest.Eventually(t, 30*time.Second, "the error reply counted", func() bool {
		st, _ = f.host.Plugin("pending_wp_expiry")
		return st.Totals.Errors >= 1
	})
	valkeytest.Eventually(t, 30*time.Second, "the item backed off", func() bool {
		st, _ = f.host.Plugin("pending_wp_expiry")
		return st.Totals.Skipped >= 1
	})
	if st.Totals.Acted != 0 {
		t.Fatalf("a Lua error reply counted as acted: %+v", st.Totals)
	}
	if !f.zmember(pk.PendingWaitpointExpiry(), wp) || f.hash(pk.Waitpoint(wp))["state"] != "bogus" {
		t.Fatal("the waitpoint or its entry changed")
	}
}
