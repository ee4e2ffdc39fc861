package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// claimSuspendable creates an execution on lane, claims it with a new
// worker and returns both (the HMAC secret installed).
func claimSuspendable(t *testing.T, b *testBundle, lane string) (*sdk.Worker, *sdk.Lease) {
	t.Helper()
	if err := b.vc.InstallWaitpointHMACSecret(b.ctx, "00112233445566778899aabbccddeeff"); err != nil {
		t.Fatal(err)
	}
	b.create(t, sdk.ExecutionSpec{Lane: lane, Kind: "wait"})
	w := b.worker(t, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{lane}})
	var l *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "claimed", func() bool { l = b.claim(t, w); return l != nil })
	return w, l
}

func deliver(t *testing.T, b *testBundle, id model.ExecutionID, wp sdk.Waitpoint, name, payload string) *sdk.SignalResult {
	t.Helper()
	res, err := b.c.DeliverSignal(b.ctx, id, sdk.Signal{WaitpointID: wp.ID, Token: wp.Token, Name: name, Payload: []byte(payload)})
	if err != nil {
		t.Fatalf("deliver %s to %s: %v", name, wp.Key, err)
	}
	return res
}

func reclaim(t *testing.T, b *testBundle, w *sdk.Worker, id model.ExecutionID) *sdk.Lease {
	t.Helper()
	var r *sdk.Lease
	valkeytest.Eventually(t, 30*time.Second, "resumed claim", func() bool { r = b.claim(t, w); return r != nil })
	if r.ID != id || r.AttemptType != "resumed" {
		t.Fatalf("resumed lease = %s %s", r.ID, r.AttemptType)
	}
	return r
}

// sameSet reports whether got holds exactly want, in any order.
func sameSet(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	n := map[string]int{}
	for _, g := range got {
		n[g]++
	}
	for _, w := range want {
		if n[w]--; n[w] < 0 {
			return false
		}
	}
	return true
}

func signalNames(sigs []sdk.ResumeSignal) (names, payloads []string) {
	for _, s := range sigs {
		names, payloads = append(names, s.Name), append(payloads, string(s.Payload))
	}
	return names, payloads
}

func TestResumeSignals(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	w, l := claimSuspendable(t, b, "docs")
	if sigs, err := l.ResumeSignals(b.ctx); err != nil || len(sigs) != 0 {
		t.Fatalf("first attempt's resume signals = %v %v", sigs, err)
	}
	s, err := l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"signed", "paid"}, MatchAll: true, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	wp := s.Waitpoints[0]
	deliver(t, b, l.ID, wp, "paid", `{"amount":12}`)
	if r := deliver(t, b, l.ID, wp, "noise", `{}`); r.Effect != "no_op" {
		t.Fatalf("unmatched signal: %+v", r)
	}
	if r := deliver(t, b, l.ID, wp, "signed", `{"by":"dana"}`); !r.Resumed {
		t.Fatalf("second required signal did not resume: %+v", r)
	}
	r := reclaim(t, b, w, l.ID)
	sigs, err := r.ResumeSignals(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	names, payloads := signalNames(sigs)
	if len(sigs) != 2 || !sameSet(names, "paid", "signed") || !sameSet(payloads, `{"amount":12}`, `{"by":"dana"}`) {
		t.Fatalf("resume signals = %v %v", names, payloads)
	}
	for _, s := range sigs {
		if (s.Name == "paid") != (string(s.Payload) == `{"amount":12}`) {
			t.Fatalf("payload of %s = %s", s.Name, s.Payload)
		}
	}
	for _, s := range sigs {
		if s.ID == "" || s.WaitpointID != wp.ID || s.SourceType != "sdk" || s.AcceptedAt.IsZero() {
			t.Fatalf("resume signal fields: %+v", s)
		}
	}
	if err := r.Complete(b.ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestTrySuspend(t *testing.T) {
	t.Parallel()

	// Signals buffered on a pending waitpoint already satisfy the
	// condition: the lease is kept and the signals come back at once.
	t.Run("AlreadySatisfiedKeepsLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		_, l := claimSuspendable(t, b, "callbacks")
		wp, err := l.CreatePendingWaitpoint(b.ctx, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		deliver(t, b, l.ID, *wp, "callback", `{"status":"done"}`)
		out, err := l.TrySuspend(b.ctx, sdk.SuspendSpec{Signals: []string{"callback"}, Pending: wp})
		if err != nil {
			t.Fatal(err)
		}
		if out.Suspended || out.Suspension == nil || !out.Suspension.AlreadySatisfied {
			t.Fatalf("outcome = %+v", out)
		}
		if len(out.Signals) != 1 || out.Signals[0].Name != "callback" || string(out.Signals[0].Payload) != `{"status":"done"}` {
			t.Fatalf("signals = %+v", out.Signals)
		}
		if st := b.state(t, l.ID); st.PublicState != model.PublicActive {
			t.Fatalf("state %s, want active (lease kept)", st.PublicState)
		}
		if err := l.Complete(b.ctx, out.Signals[0].Payload); err != nil {
			t.Fatal(err)
		}
	})

	// Nothing buffered: the job suspends and resumes later.
	t.Run("Suspends", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		w, l := claimSuspendable(t, b, "waits")
		out, err := l.TrySuspend(b.ctx, sdk.SuspendSpec{Signals: []string{"go"}, Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if !out.Suspended || len(out.Signals) != 0 {
			t.Fatalf("outcome = %+v", out)
		}
		if st := b.state(t, l.ID); st.PublicState != model.PublicSuspended {
			t.Fatalf("state %s, want suspended", st.PublicState)
		}
		if err := l.Complete(b.ctx, nil); !errors.Is(err, sdk.ErrLeaseFinished) {
			t.Fatalf("complete after suspend: %v", err)
		}
		deliver(t, b, l.ID, out.Suspension.Waitpoints[0], "go", "")
		r := reclaim(t, b, w, l.ID)
		if err := r.Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("BadSpecsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		_, l := claimSuspendable(t, b, "bad")
		for name, spec := range map[string]sdk.SuspendSpec{
			"AllWaitpointsAlone":    {AllWaitpoints: true},
			"AllWaitpointsTwoNames": {AllWaitpoints: true, ExtraWaitpoints: []string{""}, Signals: []string{"a", "b"}},
			"AllWaitpointsMatchAll": {AllWaitpoints: true, ExtraWaitpoints: []string{""}, Signals: []string{"a"}, MatchAll: true},
			"AllWaitpointsSameKey":  {AllWaitpoints: true, WaitpointKey: "k", ExtraWaitpoints: []string{"k"}},
			"NegativeTimeout":       {Timeout: -time.Second},
			"QuorumOverTotal":       {WaitpointQuorum: 3, ExtraWaitpoints: []string{""}},
			"QuorumNegative":        {WaitpointQuorum: -1, ExtraWaitpoints: []string{""}},
			"QuorumAlone":           {WaitpointQuorum: 1},
			"QuorumAndAll":          {WaitpointQuorum: 1, AllWaitpoints: true, ExtraWaitpoints: []string{""}},
		} {
			if _, err := l.TrySuspend(b.ctx, spec); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if st := b.state(t, l.ID); st.PublicState != model.PublicActive {
			t.Fatalf("refused suspends changed the state to %s", st.PublicState)
		}
	})
}
