package host_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestLeaseExpiryWithSDKWorkers: worker A claims an execution and dies
// (its context ends: renewals stop, nothing is handed back); the loaded
// lease_expiry .wasm marks the lease expired; worker B, running
// sdk.Worker.Run, finds it through lease_expiry, reclaims it and completes
// it. Exactly one completion lands: A's late Complete is refused, the
// execution ends success on its second attempt (a reclaim).
func TestLeaseExpiryWithSDKWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, plugins: map[string]host.PluginConfig{
		"lease_expiry": {Interval: 100 * time.Millisecond}}})
	copyFile(t, fixture(t, "lease_expiry"), filepath.Join(b.dir, "lease_expiry.wasm"))
	c := b.backend(t)
	ctx := valkeytest.Context(t, 2*time.Minute)
	// The SDK routes by the deployment's partition config: the host's 4.
	raw := c.Raw()
	if err := raw.Do(ctx, raw.B().Hset().Key(model.KeyConfigPartitions).FieldValue().
		FieldValue(model.ConfigFieldFlowPartitions, "4").FieldValue(model.ConfigFieldBudgetPartitions, "2").
		FieldValue(model.ConfigFieldQuotaPartitions, "2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: c})
	if err != nil {
		t.Fatal(err)
	}
	eid, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "default", Kind: "job", Payload: []byte("in")})
	if err != nil {
		t.Fatal(err)
	}

	lifeA, dieA := context.WithCancel(ctx)
	a, err := sdk.Connect(lifeA, c, sdk.WorkerConfig{WorkerID: "a", Lanes: []string{"default"}, LeaseTTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var leaseA *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "worker A claims", func() bool {
		l, err := a.ClaimNext(ctx)
		if err != nil {
			t.Fatalf("A claim: %v", err)
		}
		leaseA = l
		return l != nil
	})
	if leaseA.ID != eid {
		t.Fatalf("A claimed %s, want %s", leaseA.ID, eid)
	}
	dieA() // a crash: no renewal, nothing handed back

	b.start(t)
	var completions atomic.Int32
	var attempt atomic.Int32
	var attemptType atomic.Value
	wb, err := sdk.Connect(ctx, c, sdk.WorkerConfig{WorkerID: "b", Lanes: []string{"default"}, LeaseTTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopB := context.WithCancel(ctx)
	ranB := make(chan error, 1)
	go func() {
		ranB <- wb.Run(runCtx, func(_ context.Context, job *sdk.Job) error {
			completions.Add(1)
			attempt.Store(int32(job.Attempt))
			attemptType.Store(job.AttemptType)
			job.SetResult([]byte("done by b"))
			return nil
		})
	}()
	var core map[string]string
	valkeytest.Eventually(t, 30*time.Second, "B completes the reclaimed execution", func() bool {
		core, err = c.ExecutionCore(ctx, eid)
		return err == nil && core["lifecycle_phase"] == "terminal"
	})
	stopB()
	if err := <-ranB; err != nil && ctx.Err() == nil {
		t.Fatalf("B Run: %v", err)
	}
	if err := leaseA.Complete(ctx, []byte("done by a")); err == nil {
		t.Fatal("A's late completion was accepted")
	}
	core, err = c.ExecutionCore(ctx, eid)
	if err != nil {
		t.Fatal(err)
	}
	if core["terminal_outcome"] != "success" || core["total_attempt_count"] != "2" || core["lease_reclaim_count"] != "1" {
		t.Fatalf("core = %v", core)
	}
	if n := completions.Load(); n != 1 {
		t.Fatalf("B's handler ran %d times", n)
	}
	if attempt.Load() != 1 || attemptType.Load() != "reclaim" {
		t.Fatalf("B ran attempt %d (%v), want 1 (reclaim)", attempt.Load(), attemptType.Load())
	}
	if res, err := raw.Do(ctx, raw.B().Get().Key(model.KeysFor(eid).Result()).Build()).ToString(); err != nil || res != "done by b" {
		t.Fatalf("result = %q, %v", res, err)
	}
	if st, _ := b.host.Plugin("lease_expiry"); st.Totals.Acted < 1 {
		t.Fatalf("lease_expiry did not count the expiry: %+v", st.Totals)
	}
}

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
