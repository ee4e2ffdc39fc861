package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// waitBench is one backend row of the waitpoint tests: a client, a
// worker on lane and a claimed execution of it.
type waitBench struct {
	ctx context.Context
	c   *sdk.Client
	w   *sdk.Worker
	l   *sdk.Lease
}

// openWaitBench opens be (the HMAC secret installed on Valkey), creates
// an execution on lane and claims it.
func openWaitBench(t *testing.T, be sdkBackend, lane string) *waitBench {
	t.Helper()
	c, worker := be.open(t, valkeytest.Context(t, 5*time.Minute))
	b := &waitBench{ctx: valkeytest.Context(t, 2*time.Minute), c: c}
	if v, ok := vkClients.Load(c); ok {
		if err := v.(*valkey.Client).InstallWaitpointHMACSecret(b.ctx, "00112233445566778899aabbccddeeff"); err != nil {
			t.Fatal(err)
		}
	}
	id, err := c.CreateExecution(b.ctx, sdk.ExecutionSpec{Lane: lane, Kind: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	b.w = worker(sdk.WorkerConfig{WorkerID: "w", Lanes: []string{lane}})
	if b.l = claimOne(t, b.ctx, b.w); b.l.ID != id {
		t.Fatalf("claimed %s, want %s", b.l.ID, id)
	}
	return b
}

func (b *waitBench) deliver(t *testing.T, wp sdk.Waitpoint, name, payload string) *sdk.SignalResult {
	t.Helper()
	res, err := b.c.DeliverSignal(b.ctx, b.l.ID, sdk.Signal{WaitpointID: wp.ID, Token: wp.Token, Name: name, Payload: []byte(payload)})
	if err != nil {
		t.Fatalf("deliver %s to %s: %v", name, wp.Key, err)
	}
	return res
}

func (b *waitBench) public(t *testing.T) string {
	t.Helper()
	st, err := b.c.State(b.ctx, b.l.ID)
	if err != nil {
		t.Fatal(err)
	}
	return st.PublicState
}

// reclaim claims the resumed execution again: same attempt, "resumed".
func (b *waitBench) reclaim(t *testing.T) *sdk.Lease {
	t.Helper()
	r := claimOne(t, b.ctx, b.w)
	if r.ID != b.l.ID || r.AttemptType != "resumed" || r.AttemptIndex != b.l.AttemptIndex {
		t.Fatalf("resumed lease = %s %s attempt %d", r.ID, r.AttemptType, r.AttemptIndex)
	}
	return r
}

// TestSuspendWaitpointsBackends: on both backends, extra waitpoints (one
// per approver, each with its own token; any one resumes), pending
// waitpoints (an early signal is buffered and satisfies the suspend, or
// counts toward it and the rest arrives after), and refused specs that
// change nothing.
func TestSuspendWaitpointsBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			t.Run("ExtraWaitpoints", func(t *testing.T) {
				t.Parallel()
				b := openWaitBench(t, be, "approvals")
				s, err := b.l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: time.Hour,
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
				_, err = b.c.DeliverSignal(b.ctx, b.l.ID, sdk.Signal{WaitpointID: bob.ID, Token: s.Waitpoints[0].Token, Name: "approve"})
				if !errors.Is(err, backend.ErrInvalidToken) {
					t.Fatalf("a token of another waitpoint: %v, want backend.ErrInvalidToken", err)
				}
				if r := b.deliver(t, bob, "approve", `{"by":"bob"}`); !r.Resumed {
					t.Fatalf("bob's approval: %+v", r)
				}
				r := b.reclaim(t)
				sigs, err := r.ResumeSignals(b.ctx)
				if err != nil || len(sigs) != 1 || sigs[0].WaitpointID != bob.ID || string(sigs[0].Payload) != `{"by":"bob"}` {
					t.Fatalf("resume signals: %+v %v", sigs, err)
				}
				if err := r.Complete(b.ctx, nil); err != nil {
					t.Fatal(err)
				}
			})

			// A pending waitpoint's token can be handed out before the
			// suspend; a signal that arrives first is buffered and
			// satisfies the suspend.
			t.Run("PendingWaitpointBuffersEarlySignal", func(t *testing.T) {
				t.Parallel()
				b := openWaitBench(t, be, "callbacks")
				wp, err := b.l.CreatePendingWaitpoint(b.ctx, "", time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if res := b.deliver(t, *wp, "callback", `{}`); res.Effect != backend.EffectBuffered || res.Resumed {
					t.Fatalf("early signal: %+v", res)
				}
				s, err := b.l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"callback"}, Pending: wp})
				if err != nil {
					t.Fatal(err)
				}
				if !s.AlreadySatisfied || s.WaitpointID != wp.ID || s.Token != wp.Token {
					t.Fatalf("suspend on the pending waitpoint = %+v", s)
				}
				if st := b.public(t); st != model.PublicActive {
					t.Fatalf("already satisfied: state %s, want active (lease kept)", st)
				}
				if err := b.l.Complete(b.ctx, []byte("called back")); err != nil {
					t.Fatal(err)
				}
			})

			// A buffered signal that does not satisfy the condition alone
			// counts once the attempt suspends on the waitpoint.
			t.Run("PendingWaitpointThenSignal", func(t *testing.T) {
				t.Parallel()
				b := openWaitBench(t, be, "twostep")
				wp, err := b.l.CreatePendingWaitpoint(b.ctx, "callback:1", time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if wp.Key != "callback:1" {
					t.Fatalf("pending waitpoint %+v", wp)
				}
				if res := b.deliver(t, *wp, "paid", `"p"`); res.Effect != backend.EffectBuffered {
					t.Fatalf("early signal: %+v", res)
				}
				s, err := b.l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"paid", "shipped"}, MatchAll: true, Pending: wp})
				if err != nil {
					t.Fatal(err)
				}
				if s.AlreadySatisfied || s.WaitpointID != wp.ID || s.WaitpointKey != "callback:1" {
					t.Fatalf("suspend on the pending waitpoint = %+v", s)
				}
				if st := b.public(t); st != model.PublicSuspended {
					t.Fatalf("state %s, want suspended", st)
				}
				if r := b.deliver(t, *wp, "shipped", `"s"`); !r.Resumed {
					t.Fatalf("the second awaited signal: %+v", r)
				}
				r := b.reclaim(t)
				sigs, err := r.ResumeSignals(b.ctx)
				if _, payloads := signalNames(sigs); err != nil || len(sigs) != 2 || !sameSet(payloads, `"p"`, `"s"`) {
					t.Fatalf("resume signals: %v %v", payloads, err)
				}
				if err := r.Complete(b.ctx, nil); err != nil {
					t.Fatal(err)
				}
			})

			t.Run("BadSpecsRefused", func(t *testing.T) {
				t.Parallel()
				b := openWaitBench(t, be, "bad")
				for name, spec := range map[string]sdk.SuspendSpec{
					"PendingAndExtra": {Pending: &sdk.Waitpoint{ID: "x"}, ExtraWaitpoints: []string{""}},
					"PendingNoID":     {Pending: &sdk.Waitpoint{}},
					"TooManyExtra":    {ExtraWaitpoints: make([]string, sdk.MaxExtraWaitpoints+1)},
					"KeyTwice":        {WaitpointKey: "a", ExtraWaitpoints: []string{"b", "a"}},
				} {
					if _, err := b.l.Suspend(b.ctx, spec); !errors.Is(err, sdk.ErrInvalidInput) {
						t.Errorf("%s: %v", name, err)
					}
				}
				if _, err := b.l.CreatePendingWaitpoint(b.ctx, "", 0); !errors.Is(err, sdk.ErrInvalidInput) {
					t.Errorf("zero ttl: %v", err)
				}
				// A pending waitpoint that does not exist: refused, the
				// lease kept.
				_, err := b.l.Suspend(b.ctx, sdk.SuspendSpec{Pending: &sdk.Waitpoint{ID: model.NewUUID().String()}})
				if !errors.Is(err, backend.ErrWaitpointNotFound) {
					t.Errorf("a missing pending waitpoint: %v", err)
				}
				if st := b.public(t); st != model.PublicActive {
					t.Fatalf("refused suspends changed the state to %s", st)
				}
				if err := b.l.Complete(b.ctx, nil); err != nil {
					t.Fatalf("complete after refused suspends: %v", err)
				}
			})
		})
	}
}

// TestSuspendAllWaitpointsBackends: on both backends, AllWaitpoints waits
// for the awaited name on every waitpoint (another name fails the
// matcher) and the resumed attempt reads each waitpoint's satisfier.
func TestSuspendAllWaitpointsBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := openWaitBench(t, be, "signoff")
			s, err := b.l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: time.Hour, AllWaitpoints: true,
				WaitpointKey: "approver:ann", ExtraWaitpoints: []string{"approver:bob", "approver:cy"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Waitpoints) != 3 {
				t.Fatalf("waitpoints = %+v", s.Waitpoints)
			}
			ann, bob, cy := s.Waitpoints[0], s.Waitpoints[1], s.Waitpoints[2]
			if r := b.deliver(t, ann, "approve", `{"by":"ann"}`); r.Resumed || r.Effect != "appended_to_waitpoint" {
				t.Fatalf("ann alone: %+v", r)
			}
			if r := b.deliver(t, bob, "reject", `{}`); r.Resumed || r.Effect != "signal_ignored_matcher_failed" {
				t.Fatalf("bob's reject: %+v", r)
			}
			if r := b.deliver(t, bob, "approve", `{"by":"bob"}`); r.Resumed {
				t.Fatalf("two of three resumed: %+v", r)
			}
			if st := b.public(t); st != model.PublicSuspended {
				t.Fatalf("two of three approvals: state %s, want suspended", st)
			}
			if r := b.deliver(t, cy, "approve", `{"by":"cy"}`); !r.Resumed || r.Effect != "resume_condition_satisfied" {
				t.Fatalf("last approval: %+v", r)
			}
			r := b.reclaim(t)
			sigs, err := r.ResumeSignals(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			names, payloads := signalNames(sigs)
			if len(sigs) != 3 || names[0] != "approve" || names[1] != "approve" || names[2] != "approve" {
				t.Fatalf("resume signals = %v", names)
			}
			got := map[string]string{}
			for _, s := range sigs {
				got[s.WaitpointID] = string(s.Payload)
			}
			if got[ann.ID] != `{"by":"ann"}` || got[bob.ID] != `{"by":"bob"}` || got[cy.ID] != `{"by":"cy"}` {
				t.Fatalf("resume signal payloads by waitpoint = %v (%v)", got, payloads)
			}
			if err := r.Complete(b.ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSuspendWaitpointQuorumBackends: on both backends, a quorum of two
// of three waitpoints resumes; the same waitpoint twice counts once.
func TestSuspendWaitpointQuorumBackends(t *testing.T) {
	t.Parallel()
	for _, be := range sdkBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := openWaitBench(t, be, "review")
			s, err := b.l.Suspend(b.ctx, sdk.SuspendSpec{Signals: []string{"lgtm"}, WaitpointQuorum: 2, Timeout: time.Hour,
				ExtraWaitpoints: []string{"", ""}})
			if err != nil {
				t.Fatal(err)
			}
			r1, r2, r3 := s.Waitpoints[0], s.Waitpoints[1], s.Waitpoints[2]
			if r := b.deliver(t, r1, "lgtm", `"r1"`); r.Resumed {
				t.Fatalf("one of two: %+v", r)
			}
			if r := b.deliver(t, r1, "lgtm", `"r1 again"`); r.Resumed || r.Effect != "appended_to_waitpoint_duplicate" {
				t.Fatalf("the same reviewer twice: %+v", r)
			}
			if r := b.deliver(t, r2, "nit", `"r2"`); r.Resumed || r.Effect != "signal_ignored_matcher_failed" {
				t.Fatalf("another name: %+v", r)
			}
			if st := b.public(t); st != model.PublicSuspended {
				t.Fatalf("state %s, want suspended", st)
			}
			if r := b.deliver(t, r3, "lgtm", `"r3"`); !r.Resumed {
				t.Fatalf("second distinct reviewer: %+v", r)
			}
			r := b.reclaim(t)
			sigs, err := r.ResumeSignals(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Ordered by acceptance time in milliseconds: compare as a set.
			if _, payloads := signalNames(sigs); len(sigs) != 2 || !sameSet(payloads, `"r1"`, `"r3"`) {
				t.Fatalf("resume signals = %v", payloads)
			}
			if err := r.Complete(b.ctx, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
