package host_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

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
	waitActed(t, b.host, "lease_expiry", 1)
}

// TestDelayedPromotionWithSDKWorker: an execution created with a delay is
// promoted by the loaded delayed_promoter .wasm, whose poll interval is an
// hour (the zadd wake-up and its due-time timer do it), then run once by
// an SDK worker that does not promote anything itself.
func TestDelayedPromotionWithSDKWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{store: true, noStart: true, plugins: map[string]host.PluginConfig{
		"delayed_promoter": {Interval: time.Hour}}})
	copyFile(t, fixture(t, "delayed_promoter"), filepath.Join(b.dir, "delayed_promoter.wasm"))
	c := b.backend(t)
	ctx := valkeytest.Context(t, 2*time.Minute)
	raw := c.Raw()
	if err := raw.Do(ctx, raw.B().Hset().Key(model.KeyConfigPartitions).FieldValue().
		FieldValue(model.ConfigFieldFlowPartitions, "4").FieldValue(model.ConfigFieldBudgetPartitions, "2").
		FieldValue(model.ConfigFieldQuotaPartitions, "2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	// The first sweep is done once every partition was called.
	valkeytest.Eventually(t, 30*time.Second, "first sweep", func() bool { return b.callsOf("delayed_promoter") >= 4 })
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: c})
	if err != nil {
		t.Fatal(err)
	}
	const delay = 500 * time.Millisecond
	created := time.Now()
	eid, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "default", Kind: "job", Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sdk.Connect(ctx, c, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	var startedAt atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- w.Run(runCtx, func(_ context.Context, job *sdk.Job) error {
			runs.Add(1)
			startedAt.Store(time.Now().UnixNano())
			return nil
		})
	}()
	valkeytest.Eventually(t, 30*time.Second, "the delayed execution completed", func() bool {
		core, err := c.ExecutionCore(ctx, eid)
		return err == nil && core["terminal_outcome"] == "success"
	})
	stop()
	if err := <-ran; err != nil && ctx.Err() == nil {
		t.Fatalf("Run: %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	if started := time.Unix(0, startedAt.Load()); started.Before(created.Add(delay)) {
		t.Fatalf("ran %s after creation, before its %s delay", started.Sub(created), delay)
	}
	if st := waitActed(t, b.host, "delayed_promoter", 1); st.Totals.Acted != 1 {
		t.Fatalf("delayed_promoter acted %d times, want 1", st.Totals.Acted)
	}
}
