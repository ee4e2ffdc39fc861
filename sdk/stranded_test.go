package sdk_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// A suspend that the server refuses (no waitpoint secret installed: the
// case of `fabric run --valkey-url` on a fresh server before the
// start-up check) leaves the lease open, so the handler's error fails the
// attempt under its retry policy instead of stranding the execution
// active until its lease expires.
func TestFailedSuspendNeverStrands(t *testing.T) {
	t.Parallel()

	t.Run("Run", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0) // no InstallWaitpointHMACSecret
		id := b.create(t, sdk.ExecutionSpec{Lane: "approvals", Kind: "suspend"})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"approvals"}})
		var suspendErr atomic.Value
		stop := runWorker(t, b.ctx, w, func(ctx context.Context, j *sdk.Job) error {
			_, err := j.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: time.Hour})
			if err != nil {
				suspendErr.Store(err.Error())
			}
			return err
		})
		valkeytest.Eventually(t, 30*time.Second, "the execution failed terminally", func() bool {
			return b.state(t, id).PublicState == model.PublicFailed
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		msg, _ := suspendErr.Load().(string)
		if !strings.Contains(msg, "hmac_secret_not_initialized") {
			t.Fatalf("suspend error %q, want hmac_secret_not_initialized", msg)
		}
		st := b.state(t, id)
		if st.OwnershipState != model.OwnershipUnowned || !strings.Contains(st.Fields["failure_reason"], "hmac_secret_not_initialized") {
			t.Fatalf("after the failed suspend: ownership %s, failure_reason %q", st.OwnershipState, st.Fields["failure_reason"])
		}
		if s := w.Stats(); s.Failed != 1 || s.Suspended != 0 {
			t.Fatalf("stats %+v, want 1 failed and 0 suspended", s)
		}
	})

	t.Run("Lease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		id := b.create(t, sdk.ExecutionSpec{Lane: "approvals"})
		w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"approvals"}})
		var l *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool { l = b.claim(t, w); return l != nil })
		if _, err := l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"approve"}}); valkey.CodeOf(err) != "hmac_secret_not_initialized" {
			t.Fatalf("suspend: %v, want hmac_secret_not_initialized", err)
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("the lease ended with the refused suspend: %v", err)
		}
		// Still ours: it renews and can end another way.
		if err := l.Renew(b.ctx); err != nil {
			t.Fatalf("renew after the refused suspend: %v", err)
		}
		if err := l.Complete(b.ctx, []byte("done")); err != nil {
			t.Fatalf("complete after the refused suspend: %v", err)
		}
		if ps := b.state(t, id).PublicState; ps != model.PublicCompleted {
			t.Fatalf("public_state %s", ps)
		}
	})
}

// A worker that is never idle still reclaims expired leases of its lane:
// the reclaim pass runs whether or not eligible work keeps it busy (the
// demo's case: suspend executions abandoned while the rest of the mix kept
// every worker claiming from its solo partition).
func TestBusyWorkerReclaims(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	id := b.create(t, sdk.ExecutionSpec{Lane: "l", Kind: "crashed", Payload: []byte("x")})
	actx, kill := context.WithCancel(b.ctx)
	a, err := sdk.Connect(actx, b.vc, sdk.WorkerConfig{WorkerID: "a", Lanes: []string{"l"},
		LeaseTTL: 150 * time.Millisecond, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	var l *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "a claims", func() bool { l = b.claim(t, a); return l != nil })
	kill()
	<-l.Context().Done()
	if err := a.Close(b.ctx); err != nil {
		t.Fatal(err)
	}
	// A backlog that never runs dry: every busy job adds two more.
	for range 8 {
		b.create(t, sdk.ExecutionSpec{Lane: "l", Kind: "busy"})
	}
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "b", Lanes: []string{"l"}, Concurrency: 2})
	reclaimed := make(chan *sdk.Job, 1)
	var busy atomic.Int64
	stop := runWorker(t, b.ctx, w, func(ctx context.Context, j *sdk.Job) error {
		if j.ID == id {
			reclaimed <- j
			return nil
		}
		busy.Add(1)
		for range 2 {
			if _, err := b.c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "l", Kind: "busy"}); err != nil && ctx.Err() == nil {
				return err
			}
		}
		return nil
	})
	// Only once the worker is busy does the lease become reclaimable
	// (stand in for the lease-expiry scanner).
	valkeytest.Eventually(t, 30*time.Second, "the worker is busy", func() bool { return busy.Load() >= 20 })
	valkeytest.Eventually(t, 30*time.Second, "lease marked expired", func() bool {
		r, err := b.vc.MarkLeaseExpiredIfDue(b.ctx, &valkey.MarkLeaseExpiredIfDueParams{ExecutionID: id})
		if err != nil {
			t.Fatal(err)
		}
		return r.Reason == "marked_expired"
	})
	var j *sdk.Job
	select {
	case j = <-reclaimed:
	case <-time.After(30 * time.Second):
		t.Fatalf("not reclaimed within 30 s while busy (%d busy jobs done)", busy.Load())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if j.AttemptType != "reclaim" {
		t.Fatalf("attempt type %q, want reclaim", j.AttemptType)
	}
}

// A flow member without parents is claimable between its create and its
// add to the flow; a worker that claimed it then saw no flow_id. Its
// completion still resolves its children (the flow is read again), so
// they do not stay blocked where no dependency reconciler runs.
func TestCascadeAfterClaimBeforeFlowAdd(t *testing.T) {
	t.Parallel()
	b := setup(t, 0) // flows route with the backend client's partition count
	f, err := b.c.CreateFlow(b.ctx, "race")
	if err != nil {
		t.Fatal(err)
	}
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, ResolveDependencies: true})
	root := b.c.NewFlowExecutionID(f.ID)
	if _, err := b.c.CreateExecution(b.ctx, sdk.ExecutionSpec{ID: root, Lane: "l"}); err != nil {
		t.Fatal(err)
	}
	var l *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "root claimed before it joins its flow", func() bool { l = b.claim(t, w); return l != nil })
	if l.ID != root {
		t.Fatalf("claimed %s, want %s", l.ID, root)
	}
	now, _ := b.vc.ServerTime(b.ctx)
	if _, _, err := b.vc.AddExecutionToFlow(b.ctx, f.ID, root, now); err != nil {
		t.Fatal(err)
	}
	child, err := f.Add(b.ctx, sdk.ExecutionSpec{Lane: "l"}, root)
	if err != nil {
		t.Fatal(err)
	}
	if st := b.state(t, child); st.EligibilityState != model.EligibleBlockedByDeps {
		t.Fatalf("child before the root completes: %s", st.EligibilityState)
	}
	if err := l.Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if st := b.state(t, child); st.EligibilityState != model.EligibleNow {
		t.Fatalf("child after the root completed: %s/%s (%s)", st.EligibilityState, st.BlockingReason, st.Fields["blocking_detail"])
	}
}

// A completion that meets a busy server (a long script: BUSY) waits it
// out while the lease lasts instead of giving up after three immediate
// tries and leaving the execution to lease expiry.
func TestCompleteWaitsOutBusy(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	vc := valkeytest.Dial(t, srv.URL(), 0)
	ctx := valkeytest.Context(t, 60*time.Second)
	if _, err := vc.EnsureLibrary(ctx); err != nil {
		t.Fatal(err)
	}
	raw := vc.Raw()
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("busy-reply-threshold", "10").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "l"})
	if err != nil {
		t.Fatal(err)
	}
	// Without notifications: valkey-go v1.0.79 can panic ("protocol bug,
	// message handled out of order") when a subscription connection is
	// answered BUSY, which is not what this test is about (see the notes
	// of issue 18).
	w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"l"}, DisableNotifications: true,
		Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	var l *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool {
		l, err = w.ClaimNext(ctx)
		return err == nil && l != nil
	})
	// A script spinning 800 ms on the server's clock, on a connection of
	// its own; the completion is sent while it runs.
	const spin = `local t = redis.call('TIME'); local s = t[1] * 1000 + t[2] / 1000
while true do local n = redis.call('TIME'); if n[1] * 1000 + n[2] / 1000 - s > tonumber(ARGV[1]) then break end end
return 1`
	busy := valkeytest.Dial(t, srv.URL(), 0).Raw()
	spun := make(chan error, 1)
	startSpin := func() {
		go func() { spun <- busy.Do(ctx, busy.B().Eval().Script(spin).Numkeys(0).Arg("800").Build()).Error() }()
	}
	startSpin()
	valkeytest.Eventually(t, 30*time.Second, "the server answers BUSY", func() bool {
		select {
		case err := <-spun: // over before a PING saw it (a loaded machine): spin again
			if err != nil {
				t.Fatal(err)
			}
			startSpin()
		default:
		}
		err := raw.Do(ctx, raw.B().Ping().Build()).Error()
		return err != nil && strings.HasPrefix(err.Error(), "BUSY")
	})
	if err := l.Complete(ctx, []byte("ok")); err != nil {
		t.Fatalf("complete during BUSY: %v", err)
	}
	if err := <-spun; err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx, id); err != nil || st.PublicState != model.PublicCompleted {
		t.Fatalf("state after the busy spell: %+v %v", st, err)
	}
}

// TestClaimsRacingAKill claims from several goroutines while the worker is
// killed and its Run returns: a lease claimed after Run waited for the
// worker's goroutines starts no renewal (a WaitGroup Add racing that Wait
// is what the race detector caught in the kill -9 soak), its context is
// done, and ending it does not block.
func TestClaimsRacingAKill(t *testing.T) {
	b := setup(t, 4)
	for i := range 40 {
		b.create(t, sdk.ExecutionSpec{Lane: "kill-race", Kind: "k", Payload: []byte(fmt.Sprint(i))})
	}
	for round := range 4 {
		life, kill := context.WithCancel(b.ctx)
		w, err := sdk.Connect(life, b.vc, sdk.WorkerConfig{WorkerID: "kr", InstanceID: fmt.Sprintf("kr-%d", round),
			Lanes: []string{"kill-race"}, Concurrency: 2, LeaseTTL: 2 * time.Second, Logger: valkeytest.Logger()})
		if err != nil {
			kill()
			t.Fatal(err)
		}
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			_ = w.Run(life, func(context.Context, *sdk.Job) error { return nil })
		}()
		var claims sync.WaitGroup
		var leases []*sdk.Lease
		var mu sync.Mutex
		for range 4 {
			claims.Add(1)
			go func() {
				defer claims.Done()
				for life.Err() == nil {
					ls, _ := w.ClaimBatch(context.WithoutCancel(life), 1)
					mu.Lock()
					leases = append(leases, ls...)
					mu.Unlock()
				}
				// One more claim after the kill, racing Run's wait.
				ls, _ := w.ClaimBatch(context.WithoutCancel(life), 1)
				mu.Lock()
				leases = append(leases, ls...)
				mu.Unlock()
			}()
		}
		kill()
		<-ran
		claims.Wait()
		for _, l := range leases {
			select {
			case <-l.Context().Done():
			default:
				t.Fatalf("round %d: lease %s of a killed worker has a live context", round, l.ID)
			}
			done := make(chan struct{})
			go func() { defer close(done); _ = l.Complete(context.Background(), nil) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: ending lease %s of a killed worker blocked", round, l.ID)
			}
		}
		_ = w.Close(context.Background())
	}
}
