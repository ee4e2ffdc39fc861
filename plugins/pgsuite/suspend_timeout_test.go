package pgsuite_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

// TestSuspendAgreesWithTimeoutPlugin: suspensions written by the
// Postgres SuspendExecution are what pg_suspension_timeout acts on — a
// "cancel" one ends cancelled and a "fail" one expired (each with its
// completion event, suspension row gone, a later signal refused as not
// suspended), one resumed by a signal before its timeout is left alone,
// and an auto-resume one records the timeout signal and stays suspended
// (upstream's behaviour), still resumable by a signal.
func TestSuspendAgreesWithTimeoutPlugin(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := pgtest.Context(t, 2*time.Minute)
	// The plugins' clock runs an hour ahead: a minute's timeout is past.
	timeout := time.Now().Add(time.Minute).UnixMilli()
	type susp struct {
		id model.ExecutionID
		s  *postgres.SuspendResult
	}
	suspend := func(lane, behavior string) susp {
		id := create(t, c, lane, "", 0)
		r := claim(t, c, lane)
		s, err := c.SuspendExecution(ctx, &postgres.SuspendParams{ExecutionID: id, Fence: r.Fence(),
			SuspensionID: model.NewUUID().String(), WaitpointID: model.NewUUID().String(), WaitpointKey: "wpk:" + lane,
			SignalNames: []string{"go"}, TimeoutAt: timeout, TimeoutBehavior: behavior})
		if err != nil {
			t.Fatal(err)
		}
		return susp{id, s}
	}
	signal := func(x susp) (*postgres.DeliverSignalResult, error) {
		return c.DeliverSignal(ctx, &postgres.DeliverSignalParams{ExecutionID: x.id, WaitpointID: x.s.WaitpointID,
			Token: x.s.Token, SignalID: model.NewUUID().String(), Name: "go", Source: "test"})
	}
	cancelled := suspend("st-cancel", "cancel")
	failed := suspend("st-fail", "fail")
	resumed := suspend("st-resumed", "fail")
	auto := suspend("st-auto", "auto_resume_with_timeout_signal")
	if r, err := signal(resumed); err != nil || r.Effect != "resume_condition_satisfied" {
		t.Fatalf("resume before the host starts: %+v %v", r, err)
	}

	startHost(t, c, map[string]host.PluginConfig{"pg_suspension_timeout": {Interval: 100 * time.Millisecond}})

	for _, x := range []struct {
		s       susp
		outcome string
	}{{cancelled, "cancelled"}, {failed, "expired"}} {
		pgtest.Eventually(t, time.Minute, "suspension timed out", func() bool { return stateOf(t, c, x.s.id).Phase == "terminal" })
		if st := stateOf(t, c, x.s.id); st.Public != x.outcome {
			t.Fatalf("%s after its timeout: %+v, want %s", x.s.id, st, x.outcome)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1::uuid AND outcome = $2`,
			x.s.id.UUIDString(), x.outcome); n != 1 {
			t.Fatalf("%d %s completion events of %s", n, x.outcome, x.s.id)
		}
		if n := count(t, c, `SELECT count(*) FROM ff_suspension_current WHERE execution_id = $1::uuid`, x.s.id.UUIDString()); n != 0 {
			t.Fatalf("suspension row of %s kept", x.s.id)
		}
		before := count(t, c, `SELECT count(*) FROM ff_signal_event`)
		if _, err := signal(x.s); !errors.Is(err, postgres.CodeExecutionNotSuspended) {
			t.Fatalf("a signal after the timeout: %v, want execution_not_suspended", err)
		}
		if after := count(t, c, `SELECT count(*) FROM ff_signal_event`); after != before {
			t.Fatal("a refused signal was recorded")
		}
	}

	pgtest.Eventually(t, time.Minute, "auto-resume timeout recorded", func() bool {
		return count(t, c, `SELECT count(*) FROM ff_suspension_current WHERE execution_id = $1::uuid
   AND timeout_at_ms IS NULL AND member_map ? '__timeout__'`, auto.id.UUIDString()) == 1
	})
	if st := stateOf(t, c, auto.id); st.Phase != "suspended" {
		t.Fatalf("auto-resume suspension after its timeout: %+v", st)
	}
	if r, err := signal(auto); err != nil || r.Effect != "resume_condition_satisfied" {
		t.Fatalf("a signal after an auto-resume timeout: %+v %v", r, err)
	}

	// The resumed execution was never touched: claimable, same attempt.
	if st := stateOf(t, c, resumed.id); st.Phase != "runnable" || st.Eligibility != "eligible_now" || st.Index != 0 {
		t.Fatalf("resumed execution: %+v", st)
	}
	if r := claim(t, c, "st-resumed"); r.ExecutionID != resumed.id || r.AttemptType != "resumed" {
		t.Fatalf("claim of the resumed execution: %+v", r)
	}
}
