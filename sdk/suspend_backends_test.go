package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestSuspendSignalBackends: on both backends a lease suspends on a
// waitpoint (an invalid spec is refused and changes nothing), a forged
// token and a signal the condition does not name leave it suspended (a
// repeat under an idempotency key is a duplicate of the first), the
// awaited signal resumes it, the same attempt is claimed again as
// "resumed" and reads the resuming signal back with ResumeSignals, and a
// signal after the resume is refused.
func TestSuspendSignalBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
			ctx := valkeytest.Context(t, 2*time.Minute)
			if v, ok := vkClients.Load(c); ok {
				if err := v.(*valkey.Client).InstallWaitpointHMACSecret(ctx, "00112233445566778899aabbccddeeff"); err != nil {
					t.Fatal(err)
				}
			}
			id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "sus", Kind: "approval"})
			if err != nil {
				t.Fatal(err)
			}
			w := worker(sdk.WorkerConfig{WorkerID: "sus", Lanes: []string{"sus"}})
			l := claimOne(t, ctx, w)
			if l.ID != id {
				t.Fatalf("claimed %s, want %s", l.ID, id)
			}
			if sigs, err := l.ResumeSignals(ctx); err != nil || len(sigs) != 0 {
				t.Fatalf("resume signals of a first attempt: %v %v", sigs, err)
			}
			if _, err := l.Suspend(ctx, sdk.SuspendSpec{TimeoutBehavior: "sometimes"}); !errors.Is(err, sdk.ErrInvalidInput) {
				t.Fatalf("suspend with an unknown timeout behavior: %v", err)
			}
			if st, err := c.State(ctx, id); err != nil || st.LifecyclePhase != model.PhaseActive {
				t.Fatalf("a refused suspend changed the execution: %+v %v", st, err)
			}

			s, err := l.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: time.Hour, TimeoutBehavior: "cancel"})
			if err != nil {
				t.Fatal(err)
			}
			if s.ExecutionID != id || s.WaitpointID == "" || s.Token == "" || len(s.Waitpoints) != 1 || s.AlreadySatisfied {
				t.Fatalf("suspension %+v", s)
			}
			if st, err := c.State(ctx, id); err != nil || st.LifecyclePhase != model.PhaseSuspended || st.PublicState != model.PublicSuspended {
				t.Fatalf("suspended: %+v %v", st, err)
			}
			if err := l.Complete(ctx, nil); !errors.Is(err, sdk.ErrLeaseFinished) {
				t.Fatalf("complete after suspend: %v, want ErrLeaseFinished", err)
			}

			signal := func(name, token string) (*sdk.SignalResult, error) {
				return c.DeliverSignal(ctx, id, sdk.Signal{WaitpointID: s.WaitpointID, Token: token, Name: name,
					Payload: []byte(`{"by":"ann"}`), Source: "reviewer"})
			}
			forged := s.Token[:len(s.Token)-4] + "0000"
			if forged == s.Token {
				forged = s.Token[:len(s.Token)-4] + "1111"
			}
			if _, err := signal("approve", forged); !errors.Is(err, backend.ErrInvalidToken) {
				t.Fatalf("a forged token: %v, want backend.ErrInvalidToken", err)
			}
			if r, err := signal("reject", s.Token); err != nil || r.Resumed {
				t.Fatalf("a signal outside the condition: %+v %v", r, err)
			}
			keyed := sdk.Signal{WaitpointID: s.WaitpointID, Token: s.Token, Name: "reject", IdempotencyKey: "once"}
			first, err := c.DeliverSignal(ctx, id, keyed)
			if err != nil || first.Duplicate {
				t.Fatalf("a keyed signal: %+v %v", first, err)
			}
			if again, err := c.DeliverSignal(ctx, id, keyed); err != nil || !again.Duplicate || again.SignalID != first.SignalID {
				t.Fatalf("the keyed signal again: %+v %v, want a duplicate of %s", again, err, first.SignalID)
			}
			if st, err := c.State(ctx, id); err != nil || st.LifecyclePhase != model.PhaseSuspended {
				t.Fatalf("resumed without the awaited signal: %+v %v", st, err)
			}
			r, err := signal("approve", s.Token)
			if err != nil || !r.Resumed || r.SignalID == "" {
				t.Fatalf("the awaited signal: %+v %v", r, err)
			}

			l2 := claimOne(t, ctx, w)
			if l2.ID != id || l2.AttemptType != "resumed" || l2.AttemptIndex != l.AttemptIndex {
				t.Fatalf("claim after resume: %s %s attempt %d", l2.ID, l2.AttemptType, l2.AttemptIndex)
			}
			sigs, err := l2.ResumeSignals(ctx)
			if err != nil || len(sigs) != 1 || sigs[0].ID != r.SignalID || sigs[0].Name != "approve" ||
				string(sigs[0].Payload) != `{"by":"ann"}` || sigs[0].SourceIdentity != "reviewer" ||
				sigs[0].WaitpointID != s.WaitpointID || sigs[0].AcceptedAt.IsZero() {
				t.Fatalf("resume signals: %+v %v", sigs, err)
			}
			if _, err := signal("approve", s.Token); err == nil {
				t.Fatal("a signal after the resume was accepted")
			}
			if err := l2.Complete(ctx, []byte("approved")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
