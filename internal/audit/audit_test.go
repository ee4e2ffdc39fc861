package audit_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
	vk "github.com/valkey-io/valkey-go"
)

func TestMain(m *testing.M) {
	code := valkeytest.Run(m)
	if pgtest.Stop() != 0 {
		code = 1
	}
	os.Exit(code)
}

// Executions in every waiting state are stated, not violations; an
// execution pulled out of its index, a delay long past, a lease expired
// and never marked, and a phase nothing knows are each named.
func TestValkeyAudit(t *testing.T) {
	t.Parallel()
	vc := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	create := func(spec sdk.ExecutionSpec) model.ExecutionID {
		t.Helper()
		id, err := c.CreateExecution(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	eligible := create(sdk.ExecutionSpec{Lane: "a"})
	delayed := create(sdk.ExecutionSpec{Lane: "a", Delay: time.Hour})
	rep, err := audit.Valkey(ctx, vc, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Checked != 2 || rep.Waiting["eligible"] != 1 || rep.Waiting["delayed"] != 1 {
		t.Fatalf("healthy: %s %v", rep.Summary(), rep.Violations)
	}

	// A leased execution whose lease expired a minute ago, never marked.
	wctx, crash := context.WithCancel(ctx)
	w, err := sdk.Connect(wctx, vc, sdk.WorkerConfig{WorkerID: "w", Lanes: []string{"b"}, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	leased := create(sdk.ExecutionSpec{Lane: "b"})
	var l *sdk.Lease
	valkeytest.Eventually(t, 10*time.Second, "claimed", func() bool {
		l, err = w.ClaimNext(wctx)
		return err == nil && l != nil
	})
	crash() // no renewals from here on: the test rewrites what the audit reads
	<-l.Context().Done()
	raw := vc.Raw()
	now, _ := vc.ServerTime(ctx)
	past := now - time.Minute.Milliseconds()
	hset := func(id model.ExecutionID, kv ...string) {
		t.Helper()
		cmd := raw.B().Hset().Key(model.KeysFor(id).Core()).FieldValue()
		for i := 0; i < len(kv); i += 2 {
			cmd = cmd.FieldValue(kv[i], kv[i+1])
		}
		if err := raw.Do(ctx, cmd.Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	do := func(args ...string) {
		t.Helper()
		if err := raw.Do(ctx, raw.B().Arbitrary(args[0]).Keys(args[1]).Args(args[2:]...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	hset(leased, "lease_expires_at", itoa(past))
	// The eligible one leaves its index; the delayed one's time passed.
	pk := model.KeysOn(eligible.Partition())
	do("ZREM", pk.LaneEligible("a"), string(eligible))
	do("ZADD", model.KeysOn(delayed.Partition()).LaneDelayed("a"), itoa(past), string(delayed))
	odd := create(sdk.ExecutionSpec{Lane: "a"})
	hset(odd, "lifecycle_phase", "limbo")

	rep, err = audit.Valkey(ctx, vc, audit.Options{ReclaimWithin: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[model.ExecutionID]string{eligible: "missing from", delayed: "not promoted within 30s (is delayed_promoter running?)", leased: "not marked expired",
		odd: "unknown lifecycle phase"}
	if len(rep.Violations) != len(want) {
		t.Fatalf("violations %v, want %d", rep.Violations, len(want))
	}
	for _, v := range rep.Violations {
		if w, ok := want[model.ExecutionID(v.ID)]; !ok || !strings.Contains(v.Problem, w) {
			t.Errorf("violation %s, want %q", v, w)
		}
	}
	if rep.OK() || !strings.Contains(rep.Summary(), "violations: 4") {
		t.Fatalf("summary %s", rep.Summary())
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestValkeyAuditStateMovesBetweenReads: an execution a scanner or worker
// moves between the audit's read of its core and its read of the index
// (here: eligible, then delayed with its core and both indexes changed
// together) is judged on one consistent reading, not reported missing
// from the index its old state named.
func TestValkeyAuditStateMovesBetweenReads(t *testing.T) {
	vc := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "a"})
	if err != nil {
		t.Fatal(err)
	}
	raw := vc.Raw()
	pk := model.KeysOn(id.Partition())
	now, _ := vc.ServerTime(ctx)
	moved := false
	audit.SetBetweenReads(func() {
		if moved {
			return
		}
		moved = true
		for _, cmd := range []vk.Completed{
			raw.B().Hset().Key(model.KeysFor(id).Core()).FieldValue().FieldValue("eligibility_state", model.EligibleNotUntilTime).Build(),
			raw.B().Zrem().Key(pk.LaneEligible("a")).Member(string(id)).Build(),
			raw.B().Zadd().Key(pk.LaneDelayed("a")).ScoreMember().ScoreMember(float64(now+time.Hour.Milliseconds()), string(id)).Build(),
		} {
			if err := raw.Do(ctx, cmd).Error(); err != nil {
				t.Error(err)
			}
		}
	})
	defer audit.SetBetweenReads(nil)
	rep, err := audit.Valkey(ctx, vc, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !moved || !rep.OK() || rep.Waiting["delayed"] != 1 {
		t.Fatalf("moved %v: %s %v; want one delayed execution and no violation", moved, rep.Summary(), rep.Violations)
	}
}

// TestValkeyAuditFindsUnindexed: an execution whose core exists but that
// sits in no index — not even all_executions, as a create that failed
// after its first write left one — is reported, not silently skipped;
// the healthy one beside it is not.
func TestValkeyAuditFindsUnindexed(t *testing.T) {
	t.Parallel()
	vc := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	var ids []model.ExecutionID
	for range 2 {
		id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "a"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	stray := ids[0]
	raw := vc.Raw()
	for _, cmd := range []vk.Completed{
		raw.B().Srem().Key(model.KeysOn(stray.Partition()).AllExecutions()).Member(string(stray)).Build(),
		raw.B().Zrem().Key(model.KeysOn(stray.Partition()).LaneEligible("a")).Member(string(stray)).Build(),
	} {
		if err := raw.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := audit.Valkey(ctx, vc, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].ID != string(stray) ||
		!strings.Contains(rep.Violations[0].Problem, "in no index") || rep.Checked != 2 {
		t.Fatalf("%s %v, want one violation: %s in no index", rep.Summary(), rep.Violations, stray)
	}
	if !strings.Contains(rep.Summary(), "violations: 1") {
		t.Fatalf("summary %s", rep.Summary())
	}
	// Only narrows the search for strays too.
	rep, err = audit.Valkey(ctx, vc, audit.Options{Only: map[string]bool{string(ids[1]): true}})
	if err != nil || !rep.OK() || rep.Checked != 1 {
		t.Fatalf("only the healthy one: %v %s %v", err, rep.Summary(), rep.Violations)
	}
}
