package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

func TestSuspendWaitpoints(t *testing.T) {
	t.Parallel()

	claimOne := func(t *testing.T, b *testBundle, lane string) (*sdk.Worker, *sdk.Lease) {
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

	// One waitpoint per approver: each has its own token, and a signal on
	// any of them resumes the execution.
	t.Run("ExtraWaitpoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		w, l := claimOne(t, b, "approvals")
		s, err := l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: time.Hour,
			WaitpointKey: "approver:ann", ExtraWaitpoints: []string{"approver:bob", ""}})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Waitpoints) != 3 || s.Waitpoints[0].ID != s.WaitpointID || s.Waitpoints[0].Key != "approver:ann" ||
			s.Waitpoints[1].Key != "approver:bob" || s.Waitpoints[2].Key == "" {
			t.Fatalf("waitpoints = %+v", s.Waitpoints)
		}
		seen := map[string]bool{}
		for _, wp := range s.Waitpoints {
			if wp.ID == "" || wp.Token == "" || seen[wp.ID] || seen[wp.Token] {
				t.Fatalf("waitpoint ids and tokens must be distinct and set: %+v", s.Waitpoints)
			}
			seen[wp.ID], seen[wp.Token] = true, true
		}
		bob := s.Waitpoints[1]
		// Ann's token does not open Bob's waitpoint.
		if _, err := b.c.DeliverSignal(b.ctx, l.ID, sdk.Signal{WaitpointID: bob.ID, Token: s.Waitpoints[0].Token, Name: "approve"}); err == nil {
			t.Fatal("a token of another waitpoint was accepted")
		}
		res, err := b.c.DeliverSignal(b.ctx, l.ID, sdk.Signal{WaitpointID: bob.ID, Token: bob.Token, Name: "approve"})
		if err != nil || !res.Resumed {
			t.Fatalf("bob's approval: %+v %v", res, err)
		}
		var r *sdk.Lease
		valkeytest.Eventually(t, 30*time.Second, "resumed claim", func() bool { r = b.claim(t, w); return r != nil })
		if r.ID != l.ID || r.AttemptType != "resumed" {
			t.Fatalf("resumed lease = %s %s", r.ID, r.AttemptType)
		}
		if err := r.Complete(b.ctx, nil); err != nil {
			t.Fatal(err)
		}
	})

	// A pending waitpoint's token can be handed out before the suspend; a
	// signal that arrives first is buffered and satisfies the suspend.
	t.Run("PendingWaitpointBuffersEarlySignal", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		_, l := claimOne(t, b, "callbacks")
		wp, err := l.CreatePendingWaitpoint(b.ctx, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.c.DeliverSignal(b.ctx, l.ID, sdk.Signal{WaitpointID: wp.ID, Token: wp.Token, Name: "callback"})
		if err != nil || res.Effect != "buffered_for_pending_waitpoint" || res.Resumed {
			t.Fatalf("early signal: %+v %v", res, err)
		}
		s, err := l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"callback"}, Pending: wp})
		if err != nil {
			t.Fatal(err)
		}
		if !s.AlreadySatisfied || s.WaitpointID != wp.ID {
			t.Fatalf("suspend on the pending waitpoint = %+v", s)
		}
		if st := b.state(t, l.ID); st.PublicState != model.PublicActive {
			t.Fatalf("already satisfied: state %s, want active (lease kept)", st.PublicState)
		}
		if err := l.Complete(b.ctx, []byte("called back")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("BadSpecsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 0)
		_, l := claimOne(t, b, "bad")
		for name, spec := range map[string]sdk.SuspendSpec{
			"PendingAndExtra": {Pending: &sdk.Waitpoint{ID: "x"}, ExtraWaitpoints: []string{""}},
			"PendingNoID":     {Pending: &sdk.Waitpoint{}},
			"TooManyExtra":    {ExtraWaitpoints: make([]string, sdk.MaxExtraWaitpoints+1)},
		} {
			if _, err := l.Suspend(b.ctx, spec); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if _, err := l.CreatePendingWaitpoint(b.ctx, "", 0); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("zero ttl: %v", err)
		}
		if st := b.state(t, l.ID); st.PublicState != model.PublicActive {
			t.Fatalf("refused suspends changed the state to %s", st.PublicState)
		}
	})
}
