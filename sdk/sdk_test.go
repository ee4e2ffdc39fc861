package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

func TestMain(m *testing.M) {
	code := valkeytest.Run(m)
	stopExampleServer()
	if pgtest.Stop() != 0 { // the Postgres rows of the backend tables (backends_test.go)
		code = 1
	}
	os.Exit(code)
}

// testBundle is a fresh database with a small partition count (so a
// sweep is one or two rounds) and a client on it.
type testBundle struct {
	vc  *valkey.Client
	c   *sdk.Client
	ctx context.Context
}

func setup(t testing.TB, flowPartitions int) *testBundle {
	t.Helper()
	vc := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	if flowPartitions > 0 {
		raw := vc.Raw()
		if err := raw.Do(ctx, raw.B().Hset().Key(model.KeyConfigPartitions).FieldValue().
			FieldValue("num_flow_partitions", fmt.Sprint(flowPartitions)).
			FieldValue("num_budget_partitions", "4").FieldValue("num_quota_partitions", "4").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{vc: vc, c: c, ctx: ctx}
}

func (b *testBundle) worker(t testing.TB, cfg sdk.WorkerConfig) *sdk.Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = valkeytest.Logger()
	}
	w, err := sdk.Connect(b.ctx, b.vc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

func (b *testBundle) create(t testing.TB, spec sdk.ExecutionSpec) model.ExecutionID {
	t.Helper()
	id, err := b.c.CreateExecution(b.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *testBundle) result(t *testing.T, id model.ExecutionID) []byte {
	t.Helper()
	r, err := b.c.Result(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (b *testBundle) claim(t *testing.T, w *sdk.Worker) *sdk.Lease {
	t.Helper()
	l, err := w.ClaimNext(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (b *testBundle) state(t *testing.T, id model.ExecutionID) *sdk.ExecutionState {
	t.Helper()
	s, err := b.c.State(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// attempts returns the attempt indexes and the attempt_state of each.
func (b *testBundle) attempts(t *testing.T, id model.ExecutionID) []string {
	t.Helper()
	raw := b.vc.Raw()
	k := model.KeysFor(id)
	idx, err := raw.Do(b.ctx, raw.B().Zrange().Key(k.Attempts()).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range idx {
		var i int
		fmt.Sscan(s, &i)
		st, err := raw.Do(b.ctx, raw.B().Hget().Key(k.Attempt(i)).Field("attempt_state").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

func TestClient(t *testing.T) {
	t.Parallel()

	t.Run("BadInputFailsBeforeNetwork", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		// A client whose connection is closed: any network call would
		// fail with a connection error, not ErrInvalidInput.
		vc := valkeytest.Dial(t, valkeytest.Server(t).URL(), 0)
		c, err := sdk.NewClient(b.ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		vc.Close()
		long := make([]byte, 65)
		for i := range long {
			long[i] = 'a'
		}
		cases := map[string]sdk.ExecutionSpec{
			"EmptyLane":       {},
			"LongLane":        {Lane: string(long)},
			"ControlByteLane": {Lane: "a\tb"},
			"NonASCIILane":    {Lane: "läne"},
			"NegativeDelay":   {Lane: "l", Delay: -time.Second},
			"PriorityHigh":    {Lane: "l", Priority: 9001},
			"PriorityLow":     {Lane: "l", Priority: -1},
			"BadID":           {Lane: "l", ID: "not-an-id"},
			"BareUUID":        {Lane: "l", ID: model.ExecutionID(model.NewUUID().String())},
			"EmptyTagKey":     {Lane: "l", Tags: map[string]string{"": "v"}},
			"NegativeRetries": {Lane: "l", Policy: &sdk.Policy{MaxRetries: -1}},
			"NegativeTimeout": {Lane: "l", Policy: &sdk.Policy{AttemptTimeout: -time.Second}},
			"CapWithComma":    {Lane: "l", Policy: &sdk.Policy{RequiredCapabilities: []string{"gpu,cuda"}}},
			"CapEmpty":        {Lane: "l", Policy: &sdk.Policy{RequiredCapabilities: []string{""}}},
			"CapSpace":        {Lane: "l", Policy: &sdk.Policy{RequiredCapabilities: []string{"g pu"}}},
			"BadBackoff":      {Lane: "l", Policy: &sdk.Policy{Backoff: sdk.ExponentialBackoff(time.Second, time.Millisecond, 2)}},
			"BadMultiplier":   {Lane: "l", Policy: &sdk.Policy{Backoff: sdk.ExponentialBackoff(time.Second, time.Minute, 0.5)}},
		}
		for name, spec := range cases {
			_, err := c.CreateExecution(b.ctx, spec)
			if !errors.Is(err, sdk.ErrInvalidInput) {
				t.Errorf("%s: err = %v, want ErrInvalidInput", name, err)
			}
		}
		if _, err := c.State(b.ctx, "garbage"); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("State(garbage): %v", err)
		}
		_, err = sdk.Connect(b.ctx, vc, sdk.WorkerConfig{WorkerID: "w"})
		if !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("Connect without lanes: %v", err)
		}
		_, err = sdk.Connect(b.ctx, vc, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, Capabilities: []string{"a,b"}})
		if !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("Connect with bad caps: %v", err)
		}
	})

	t.Run("CreateStoresPolicyAndState", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 16)
		id, err := b.c.CreateExecution(b.ctx, sdk.ExecutionSpec{Lane: "mail", Kind: "send", Payload: []byte("p"),
			Priority: 5, Tags: map[string]string{"app.k": "v"},
			Policy: &sdk.Policy{MaxRetries: 2, Backoff: sdk.FixedBackoff(250 * time.Millisecond),
				RequiredCapabilities: []string{"gpu", "cuda"}}})
		if err != nil {
			t.Fatal(err)
		}
		if id.Partition() != b.c.Partitions().SoloPartition("mail") {
			t.Fatalf("id %s not on the lane's solo partition", id)
		}
		s := b.state(t, id)
		if s.PublicState != model.PublicWaiting || s.Lane != "mail" || s.Kind != "send" ||
			s.Fields["required_capabilities"] != "cuda,gpu" || s.Fields["priority"] != "5" {
			t.Fatalf("state = %+v", s)
		}
		raw := b.vc.Raw()
		pol, err := raw.Do(b.ctx, raw.B().Get().Key(model.KeysFor(id).Policy()).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		want := `{"priority":5,"retry_policy":{"max_retries":2,"backoff":{"type":"fixed","delay_ms":250},"retryable_categories":[]},"max_reclaim_count":100,"max_replay_count":10,"budget_ids":[],"routing_requirements":{"required_capabilities":["gpu","cuda"]},"max_signals_per_execution":10000}`
		if pol != want {
			t.Fatalf("policy\n got %s\nwant %s", pol, want)
		}
		d, err := b.c.CreateExecution(b.ctx, sdk.ExecutionSpec{Lane: "mail", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, d); s.PublicState != model.PublicDelayed {
			t.Fatalf("delayed state = %s", s.PublicState)
		}
		if _, err := b.c.State(b.ctx, b.c.Partitions().NewSoloExecutionID("mail")); !errors.Is(err, sdk.ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
	})

	t.Run("IdempotencyKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 16)
		spec := sdk.ExecutionSpec{Lane: "l", IdempotencyKey: "order-1"}
		a := b.create(t, spec)
		again := b.create(t, spec)
		if a != again {
			t.Fatalf("duplicate create returned %s, want %s", again, a)
		}
	})
}

// TestWorker covers the claim loop end to end.
func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("ExactlyOnceAcrossWorkers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 64)
		const workers, perLane = 4, 60
		lanes := []string{"a", "b", "c"}
		var ids []model.ExecutionID
		for i := 0; i < perLane; i++ {
			for _, l := range lanes {
				ids = append(ids, b.create(t, sdk.ExecutionSpec{Lane: l, Payload: []byte(fmt.Sprint(i))}))
			}
		}
		var mu sync.Mutex
		runs := map[model.ExecutionID]int{}
		done := make(chan struct{})
		ctx, cancel := context.WithCancel(b.ctx)
		var wg sync.WaitGroup
		for i := 0; i < workers; i++ {
			w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: lanes, Concurrency: 3})
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := w.Run(ctx, func(ctx context.Context, j *sdk.Job) error {
					mu.Lock()
					runs[j.ID]++
					if len(runs) == len(ids) {
						select {
						case <-done:
						default:
							close(done)
						}
					}
					mu.Unlock()
					j.SetResult(append([]byte("r"), j.Payload...))
					return nil
				}); err != nil {
					t.Error(err)
				}
			}()
		}
		select {
		case <-done:
		case <-b.ctx.Done():
			for _, id := range ids {
				mu.Lock()
				n := runs[id]
				mu.Unlock()
				if n == 0 {
					m, _ := b.vc.ExecutionCore(context.Background(), id)
					t.Logf("never ran: %+v", m)
					break
				}
			}
			t.Fatal("not all executions ran")
		}
		valkeytest.Eventually(t, 30*time.Second, "all completed", func() bool {
			for _, id := range ids {
				if b.state(t, id).PublicState != model.PublicCompleted {
					return false
				}
			}
			return true
		})
		cancel()
		wg.Wait()
		for _, id := range ids {
			if runs[id] != 1 {
				t.Errorf("%s ran %d times", id, runs[id])
			}
			if at := b.attempts(t, id); len(at) != 1 || at[0] != "ended_success" {
				t.Errorf("%s attempts = %v, want one ended_success", id, at)
			}
		}
		r := b.result(t, ids[0])
		if string(r) != "r0" {
			t.Errorf("result = %q", r)
		}
	})

	// Workers claiming in batches (ClaimBatch: one pipelined round trip of
	// fabric_claim_execution per batch) from the same lanes run every
	// execution exactly once, and a batch does take several.
	t.Run("ExactlyOnceBatchedClaims", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 16)
		const workers, perLane, batch = 4, 40, 5
		lanes := []string{"a", "b"}
		var ids []model.ExecutionID
		for i := 0; i < perLane; i++ {
			for _, l := range lanes {
				ids = append(ids, b.create(t, sdk.ExecutionSpec{Lane: l, Payload: []byte(fmt.Sprint(i))}))
			}
		}
		var mu sync.Mutex
		runs := map[model.ExecutionID]int{}
		most := 0
		var wg sync.WaitGroup
		for i := 0; i < workers; i++ {
			w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: lanes, DisableNotifications: i%2 == 1})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b.ctx.Err() == nil {
					mu.Lock()
					finished := len(runs) == len(ids)
					mu.Unlock()
					if finished {
						return
					}
					ls, err := w.ClaimBatch(b.ctx, batch)
					if err != nil {
						t.Error(err)
						return
					}
					if len(ls) > batch {
						t.Errorf("ClaimBatch(%d) took %d", batch, len(ls))
					}
					mu.Lock()
					most = max(most, len(ls))
					for _, l := range ls {
						runs[l.ID]++
					}
					mu.Unlock()
					for _, l := range ls {
						if err := l.Complete(b.ctx, nil); err != nil {
							t.Error(err)
						}
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for _, id := range ids {
			if runs[id] != 1 {
				t.Errorf("%s claimed %d times", id, runs[id])
			}
			if at := b.attempts(t, id); len(at) != 1 || at[0] != "ended_success" {
				t.Errorf("%s attempts = %v, want one ended_success", id, at)
			}
		}
		if most < 2 {
			t.Errorf("no batch took more than %d executions", most)
		}
	})

	t.Run("CapabilityRouting", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 16)
		gpu := &sdk.Policy{RequiredCapabilities: []string{"gpu"}}
		var gpuIDs, plainIDs []model.ExecutionID
		for i := 0; i < 5; i++ {
			gpuIDs = append(gpuIDs, b.create(t, sdk.ExecutionSpec{Lane: "ml", Policy: gpu}))
			plainIDs = append(plainIDs, b.create(t, sdk.ExecutionSpec{Lane: "ml"}))
		}
		cpu := b.worker(t, sdk.WorkerConfig{WorkerID: "cpu", Lanes: []string{"ml"}, Capabilities: []string{"avx"}})
		var cpuRan sync.Map
		cpuCtx, stopCPU := context.WithCancel(b.ctx)
		cpuDone := make(chan error, 1)
		go func() {
			cpuDone <- cpu.Run(cpuCtx, func(ctx context.Context, j *sdk.Job) error { cpuRan.Store(j.ID, true); return nil })
		}()
		valkeytest.Eventually(t, 30*time.Second, "plain work done, gpu work blocked", func() bool {
			for _, id := range plainIDs {
				if b.state(t, id).PublicState != model.PublicCompleted {
					return false
				}
			}
			for _, id := range gpuIDs {
				if b.state(t, id).EligibilityState != model.EligibleBlockedByRoute {
					return false
				}
			}
			return true
		})
		// Stop the cpu worker first: it would block the work again.
		stopCPU()
		if err := <-cpuDone; err != nil {
			t.Fatal(err)
		}
		for _, id := range gpuIDs {
			if _, ok := cpuRan.Load(id); ok {
				t.Fatalf("gpu execution %s ran on a worker without gpu", id)
			}
			// Stand in for the unblock scanner.
			if err := b.vc.UnblockExecution(b.ctx, id, time.Now().UnixMilli(), "waiting_for_capable_worker"); err != nil {
				t.Fatal(err)
			}
		}
		g := b.worker(t, sdk.WorkerConfig{WorkerID: "gpu", Lanes: []string{"ml"}, Capabilities: []string{"gpu"}})
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		go g.Run(ctx, func(ctx context.Context, j *sdk.Job) error { return nil })
		valkeytest.Eventually(t, 30*time.Second, "gpu work done by the gpu worker", func() bool {
			for _, id := range gpuIDs {
				if b.state(t, id).PublicState != model.PublicCompleted {
					return false
				}
			}
			return true
		})
		for _, id := range gpuIDs {
			if s := b.state(t, id); s.Fields["current_worker_id"] != "" && s.Fields["current_worker_id"] != "gpu" {
				t.Fatalf("%s completed by %s", id, s.Fields["current_worker_id"])
			}
			if _, ok := cpuRan.Load(id); ok {
				t.Fatalf("gpu execution %s ran on the cpu worker", id)
			}
		}
	})

	t.Run("LeaseLossCancelsHandler", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		id := b.create(t, sdk.ExecutionSpec{Lane: "l"})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, LeaseTTL: 300 * time.Millisecond})
		var l *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool {
			l = b.claim(t, w)
			return l != nil
		})
		if l.ID != id || l.AttemptType != "initial" {
			t.Fatalf("lease = %+v", l)
		}
		if _, err := b.vc.RevokeLease(b.ctx, &valkey.RevokeLeaseParams{ExecutionID: id}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Context().Done():
		case <-b.ctx.Done():
			t.Fatal("lease context not cancelled after revoke")
		}
		if c := context.Cause(l.Context()); !errors.Is(c, sdk.ErrLeaseLost) || !errors.Is(c, valkey.CodeLeaseRevoked) {
			t.Fatalf("cause = %v", c)
		}
		if err := l.Complete(b.ctx, nil); !errors.Is(err, sdk.ErrLeaseLost) {
			t.Fatalf("complete after loss: %v", err)
		}
	})

	t.Run("RenewalKeepsLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		id := b.create(t, sdk.ExecutionSpec{Lane: "l"})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, LeaseTTL: 200 * time.Millisecond})
		var l *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool {
			l = b.claim(t, w)
			return l != nil
		})
		first := l.ExpiresAt()
		valkeytest.Eventually(t, 30*time.Second, "renewed twice", func() bool {
			return l.ExpiresAt().Sub(first) >= 250*time.Millisecond
		})
		if err := l.Complete(b.ctx, []byte("ok")); err != nil {
			t.Fatal(err)
		}
		if err := l.Complete(b.ctx, nil); !errors.Is(err, sdk.ErrLeaseFinished) {
			t.Fatalf("second complete: %v", err)
		}
		if s := b.state(t, id); s.PublicState != model.PublicCompleted || s.LeaseEpoch != 1 {
			t.Fatalf("state = %s epoch %d", s.PublicState, s.LeaseEpoch)
		}
	})

	t.Run("ClaimThroughSiblingGrant", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		id := b.create(t, sdk.ExecutionSpec{Lane: "l"})
		// Another instance of the same worker holds the grant: the grant
		// call fails but the pipelined claim succeeds, and the lease must
		// not be dropped.
		if err := b.vc.IssueClaimGrant(b.ctx, &valkey.IssueClaimGrantParams{ExecutionID: id, WorkerID: "w",
			WorkerInstanceID: "sibling", Lane: "l", GrantTTLMs: 5000}); err != nil {
			t.Fatal(err)
		}
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}})
		var l *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool { l = b.claim(t, w); return l != nil })
		if l.ID != id {
			t.Fatalf("claimed %s", l.ID)
		}
		if err := l.Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("HeartbeatReregisters", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, Capabilities: []string{"gpu"},
			LeaseTTL: 100 * time.Millisecond})
		raw := b.vc.Raw()
		alive := model.WorkerAliveKey(sdk.DefaultNamespace, w.InstanceID())
		caps, err := raw.Do(b.ctx, raw.B().Hget().Key(model.WorkerCapsKey(sdk.DefaultNamespace, w.InstanceID())).Field("caps_csv").Build()).ToString()
		if err != nil || caps != "gpu" {
			t.Fatalf("caps_csv = %q, %v", caps, err)
		}
		if err := raw.Do(b.ctx, raw.B().Del().Key(alive).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		valkeytest.Eventually(t, 30*time.Second, "re-registered", func() bool {
			n, err := raw.Do(b.ctx, raw.B().Exists().Key(alive).Build()).AsInt64()
			return err == nil && n == 1
		})
	})

	t.Run("DuplicateInstance", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		b.worker(t, sdk.WorkerConfig{WorkerID: "w", InstanceID: "i-1", Lanes: []string{"l"}})
		_, err := sdk.Connect(b.ctx, b.vc, sdk.WorkerConfig{WorkerID: "w", InstanceID: "i-1", Lanes: []string{"l"}})
		if !errors.Is(err, sdk.ErrDuplicateInstance) {
			t.Fatalf("err = %v", err)
		}
	})
}

// runWorker runs w until the test ends and returns a channel with Run's
// result.
func runWorker(t *testing.T, ctx context.Context, w *sdk.Worker, h sdk.Handler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, h) }()
	t.Cleanup(cancel)
	return func() error { cancel(); return <-done }
}

func TestWorkerOutcomes(t *testing.T) {
	t.Parallel()

	t.Run("CrashedWorkerIsReclaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		id := b.create(t, sdk.ExecutionSpec{Lane: "l", Payload: []byte("x")})
		actx, kill := context.WithCancel(b.ctx)
		a, err := sdk.Connect(actx, b.vc, sdk.WorkerConfig{WorkerID: "a", Lanes: []string{"l"},
			LeaseTTL: 150 * time.Millisecond, Logger: valkeytest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		var l *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "a claims", func() bool { l = b.claim(t, a); return l != nil })
		kill() // no cleanup: renewals stop, the lease stays
		<-l.Context().Done()
		if err := a.Close(b.ctx); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, id); s.OwnershipState != model.OwnershipLeased {
			t.Fatalf("after kill: ownership %s", s.OwnershipState)
		}
		// Stand in for the lease-expiry scanner.
		valkeytest.Eventually(t, 30*time.Second, "lease marked expired", func() bool {
			r, err := b.vc.MarkLeaseExpiredIfDue(b.ctx, &valkey.MarkLeaseExpiredIfDueParams{ExecutionID: id})
			if err != nil {
				t.Fatal(err)
			}
			return r.Reason == "marked_expired"
		})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "b", Lanes: []string{"l"}})
		got := make(chan *sdk.Job, 1)
		stop := runWorker(t, b.ctx, w, func(ctx context.Context, j *sdk.Job) error { got <- j; return nil })
		j := <-got
		if j.ID != id || j.AttemptType != "reclaim" || j.Attempt != 1 || string(j.Payload) != "x" {
			t.Fatalf("job = %+v", j)
		}
		valkeytest.Eventually(t, 30*time.Second, "completed", func() bool {
			return b.state(t, id).PublicState == model.PublicCompleted
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if at := b.attempts(t, id); len(at) != 2 || at[0] != "interrupted_reclaimed" || at[1] != "ended_success" {
			t.Fatalf("attempts = %v", at)
		}
		if st := w.Stats(); st.Reclaimed != 1 || st.Completed != 1 {
			t.Fatalf("stats = %+v", st)
		}
	})

	t.Run("FailRetriesPerPolicy", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		retry := b.create(t, sdk.ExecutionSpec{Lane: "l", Kind: "flaky", Policy: &sdk.Policy{MaxRetries: 3,
			Backoff: sdk.ExponentialBackoff(10*time.Millisecond, 40*time.Millisecond, 2)}})
		perm := b.create(t, sdk.ExecutionSpec{Lane: "l", Kind: "permanent", Policy: &sdk.Policy{MaxRetries: 3}})
		none := b.create(t, sdk.ExecutionSpec{Lane: "l", Kind: "no-policy"})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, PromoteDelayed: true})
		stop := runWorker(t, b.ctx, w, func(ctx context.Context, j *sdk.Job) error {
			switch {
			case j.Kind == "flaky" && j.Attempt < 2:
				return fmt.Errorf("flaky attempt %d", j.Attempt)
			case j.Kind == "permanent":
				return sdk.Permanent(errors.New("bad input"))
			case j.Kind == "no-policy":
				return errors.New("boom")
			}
			return nil
		})
		valkeytest.Eventually(t, 30*time.Second, "all terminal", func() bool {
			return b.state(t, retry).Terminal() && b.state(t, perm).Terminal() && b.state(t, none).Terminal()
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, retry); s.PublicState != model.PublicCompleted || s.RetryCount != 2 {
			t.Fatalf("retry: %s retries %d", s.PublicState, s.RetryCount)
		}
		if at := b.attempts(t, retry); fmt.Sprint(at) != "[ended_failure ended_failure ended_success]" {
			t.Fatalf("retry attempts = %v", at)
		}
		for _, id := range []model.ExecutionID{perm, none} {
			if s := b.state(t, id); s.PublicState != model.PublicFailed || s.RetryCount != 0 || s.AttemptCount != 1 {
				t.Fatalf("%s: %s retries %d attempts %d", id, s.PublicState, s.RetryCount, s.AttemptCount)
			}
		}
		if s := b.state(t, perm); s.FailureReason != "bad input" {
			t.Fatalf("failure reason = %q", s.FailureReason)
		}
		if st := w.Stats(); st.Retried != 2 || st.Failed != 2 || st.Completed != 1 {
			t.Fatalf("stats = %+v", st)
		}
	})

	t.Run("DelayFromHandler", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		id := b.create(t, sdk.ExecutionSpec{Lane: "l"})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, PromoteDelayed: true})
		var calls int
		stop := runWorker(t, b.ctx, w, func(ctx context.Context, j *sdk.Job) error {
			calls++
			if calls == 1 {
				return sdk.DelayFor(20 * time.Millisecond)
			}
			return nil
		})
		valkeytest.Eventually(t, 30*time.Second, "completed", func() bool {
			return b.state(t, id).PublicState == model.PublicCompleted
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		// A delay keeps the attempt: one attempt, two leases.
		if s := b.state(t, id); s.AttemptCount != 1 || s.LeaseEpoch != 2 || calls != 2 {
			t.Fatalf("attempts %d epoch %d calls %d", s.AttemptCount, s.LeaseEpoch, calls)
		}
	})

	t.Run("GracefulStopHandsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		id := b.create(t, sdk.ExecutionSpec{Lane: "l"})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, ShutdownTimeout: 50 * time.Millisecond})
		started := make(chan struct{})
		var cause error
		stop := runWorker(t, b.ctx, w, func(ctx context.Context, j *sdk.Job) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return ctx.Err()
		})
		<-started
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(cause, sdk.ErrShutdown) {
			t.Fatalf("handler cause = %v", cause)
		}
		s := b.state(t, id)
		if s.PublicState != model.PublicDelayed || s.OwnershipState != model.OwnershipUnowned || s.RetryCount != 0 {
			t.Fatalf("after stop: %s %s retries %d", s.PublicState, s.OwnershipState, s.RetryCount)
		}
		if st := w.Stats(); st.HandedBack != 1 || st.Failed != 0 {
			t.Fatalf("stats = %+v", st)
		}
	})

	t.Run("CloseHandsBackClaimedLeases", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		id := b.create(t, sdk.ExecutionSpec{Lane: "l"})
		w, err := sdk.Connect(b.ctx, b.vc, sdk.WorkerConfig{WorkerID: "w", InstanceID: "inst", Lanes: []string{"l"},
			Logger: valkeytest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		var l *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool { l = b.claim(t, w); return l != nil })
		if err := w.Close(b.ctx); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, id); s.OwnershipState != model.OwnershipUnowned {
			t.Fatalf("after close: %s", s.OwnershipState)
		}
		if _, err := w.ClaimNext(b.ctx); !errors.Is(err, sdk.ErrWorkerClosed) {
			t.Fatalf("claim after close: %v", err)
		}
		// The alive key is gone: the instance id is reusable at once.
		b.worker(t, sdk.WorkerConfig{WorkerID: "w", InstanceID: "inst", Lanes: []string{"l"}})
	})

	t.Run("OperatorCancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 8)
		id := b.create(t, sdk.ExecutionSpec{Lane: "l"})
		if err := b.c.CancelExecution(b.ctx, id, "not needed"); err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, id); s.PublicState != model.PublicCancelled {
			t.Fatalf("state = %s", s.PublicState)
		}
		if err := b.c.CancelExecution(b.ctx, id, "again"); !errors.Is(err, valkey.CodeExecutionNotActive) {
			t.Fatalf("second cancel: %v", err)
		}
	})
}

func TestSuspendAndSignal(t *testing.T) {
	t.Parallel()
	b := setup(t, 0) // the backend client's partition count: the keystore fan-out must match
	if err := b.vc.InstallWaitpointHMACSecret(b.ctx, "00112233445566778899aabbccddeeff"); err != nil {
		t.Fatal(err)
	}
	id := b.create(t, sdk.ExecutionSpec{Lane: "approvals", Payload: []byte("req")})
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"approvals"}})
	suspended := make(chan *sdk.Suspension, 1)
	resumed := make(chan *sdk.Job, 1)
	stop := runWorker(t, b.ctx, w, func(ctx context.Context, j *sdk.Job) error {
		if _, err := j.AppendFrame(ctx, sdk.Frame{Type: "log", Payload: []byte("attempt " + j.AttemptType)}); err != nil {
			return err
		}
		if j.AttemptType != "resumed" {
			s, err := j.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: time.Hour})
			if err != nil {
				return err
			}
			suspended <- s
			return nil // ignored: the lease is already released
		}
		resumed <- j
		return nil
	})
	s := <-suspended
	if st := b.state(t, id); st.PublicState != model.PublicSuspended {
		t.Fatalf("state = %s", st.PublicState)
	}
	if _, err := b.c.DeliverSignal(b.ctx, id, sdk.Signal{WaitpointID: s.WaitpointID, Token: "bad:00", Name: "approve"}); err == nil {
		t.Fatal("bad token accepted")
	}
	other, err := b.c.DeliverSignal(b.ctx, id, sdk.Signal{WaitpointID: s.WaitpointID, Token: s.Token, Name: "other"})
	if err != nil || other.Resumed {
		t.Fatalf("non-matching signal: %+v %v", other, err)
	}
	res, err := b.c.DeliverSignal(b.ctx, id, sdk.Signal{WaitpointID: s.WaitpointID, Token: s.Token, Name: "approve",
		Payload: []byte(`{"by":"ann"}`)})
	if err != nil || !res.Resumed {
		t.Fatalf("approve: %+v %v", res, err)
	}
	j := <-resumed
	if j.ID != id || j.Attempt != 0 || string(j.Payload) != "req" {
		t.Fatalf("resumed job = %+v", j)
	}
	valkeytest.Eventually(t, 30*time.Second, "completed", func() bool {
		return b.state(t, id).PublicState == model.PublicCompleted
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	frames, closed, err := b.c.ReadAttemptStream(b.ctx, id, 0, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 || frames[0].Fields["payload"] != "attempt initial" || frames[1].Fields["payload"] != "attempt resumed" || !closed {
		t.Fatalf("frames = %+v closed %v", frames, closed)
	}
	rest, _, err := b.c.ReadAttemptStream(b.ctx, id, 0, frames[0].ID, 100)
	if err != nil || len(rest) != 1 || rest[0].ID != frames[1].ID {
		t.Fatalf("after %s: %+v %v", frames[0].ID, rest, err)
	}
	if st := w.Stats(); st.Suspended != 1 || st.Resumed != 1 || st.Completed != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestFlow(t *testing.T) {
	t.Parallel()

	t.Run("DiamondRunsInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		f, err := b.c.CreateFlow(b.ctx, "diamond")
		if err != nil {
			t.Fatal(err)
		}
		add := func(name string, after ...model.ExecutionID) model.ExecutionID {
			id, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: "dag", Kind: name}, after...)
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		a := add("a")
		l, r := add("l", a), add("r", a)
		z := add("z", l, r)
		if s := b.state(t, z); s.EligibilityState != model.EligibleBlockedByDeps || s.FlowID != f.ID.String() {
			t.Fatalf("z before: %s flow %q", s.EligibilityState, s.FlowID)
		}
		// Members held until their edges were applied leave no stale
		// entry in lane:delayed.
		delayed := model.KeysOn(z.Partition()).LaneDelayed("dag")
		if n, err := b.vc.Raw().Do(b.ctx, b.vc.Raw().B().Zcard().Key(delayed).Build()).AsInt64(); err != nil || n != 0 {
			t.Fatalf("%s holds %d entries (%v), want 0", delayed, n, err)
		}
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"dag"}, ResolveDependencies: true, Concurrency: 2})
		var mu sync.Mutex
		var order []string
		stop := runWorker(t, b.ctx, w, func(ctx context.Context, j *sdk.Job) error {
			mu.Lock()
			order = append(order, j.Kind)
			mu.Unlock()
			return nil
		})
		valkeytest.Eventually(t, 30*time.Second, "z completed", func() bool {
			return b.state(t, z).PublicState == model.PublicCompleted
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if len(order) != 4 || order[0] != "a" || order[3] != "z" {
			t.Fatalf("order = %v", order)
		}
	})

	t.Run("ParentFinishedBeforeEdge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		f, err := b.c.CreateFlow(b.ctx, "late")
		if err != nil {
			t.Fatal(err)
		}
		a, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: "late"})
		if err != nil {
			t.Fatal(err)
		}
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"late"}})
		var l *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool { l = b.claim(t, w); return l != nil })
		if err := l.Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
		c, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: "late"}, a)
		if err != nil {
			t.Fatal(err)
		}
		if s := b.state(t, c); s.EligibilityState != model.EligibleNow {
			t.Fatalf("child of a finished parent: %s (%s)", s.EligibilityState, s.Fields["blocking_detail"])
		}
	})

	t.Run("CancelFlowCancelsMembers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		f, err := b.c.CreateFlow(b.ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		a, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: "dag"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: "dag"}, a)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.c.CancelFlow(b.ctx, f.ID, "stop"); err != nil {
			t.Fatal(err)
		}
		for _, id := range []model.ExecutionID{a, c} {
			if s := b.state(t, id); s.PublicState != model.PublicCancelled {
				t.Fatalf("%s: %s", id, s.PublicState)
			}
		}
		if _, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: "dag", ID: a}); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Fatalf("add with id: %v", err)
		}
	})
}
