package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/model"
)

// controlTables is the text of every row the control operations write,
// for "nothing changed" checks (created_at-free columns only).
func controlTables(t *testing.T, c *postgres.Client) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT string_agg(row(execution_id, flow_id, lifecycle_phase, ownership_state, eligibility_state, public_state,
            attempt_state, blocking_reason, cancellation_reason, attempt_index, raw_fields)::text, '|' ORDER BY execution_id) FROM ff_exec_core`,
		`SELECT string_agg(row(execution_id, attempt_index, worker_id, lease_epoch, lease_expires_at_ms, outcome, terminal_at_ms)::text, '|'
            ORDER BY execution_id, attempt_index) FROM ff_attempt`,
		`SELECT string_agg(row(flow_id, public_flow_state, terminal_at_ms, raw_fields)::text, '|' ORDER BY flow_id) FROM ff_flow_core`,
		`SELECT string_agg(row(waitpoint_id, execution_id, state, token, expires_at_ms, condition)::text, '|' ORDER BY waitpoint_id)
            FROM ff_waitpoint_pending`,
		`SELECT string_agg(row(upstream_eid, downstream_eid)::text, '|' ORDER BY upstream_eid, downstream_eid) FROM ff_edge`,
		`SELECT string_agg(row(downstream_eid, policy, success_count, fail_count, skip_count, running_count)::text, '|'
            ORDER BY downstream_eid) FROM ff_edge_group`,
		`SELECT string_agg(row(execution_id, suspension_id, timeout_at_ms, satisfied_set, member_map)::text, '|' ORDER BY execution_id) FROM ff_suspension_current`,
		`SELECT string_agg(row(execution_id, attempt_index, ts_ms, seq, fields)::text, '|' ORDER BY execution_id, ts_ms, seq) FROM ff_stream_frame`,
		`SELECT string_agg(row(execution_id, document_json, version)::text, '|' ORDER BY execution_id) FROM ff_stream_summary`,
		`SELECT count(*)::text FROM ff_signal_event`,
		`SELECT count(*)::text FROM ff_lease_event`,
		`SELECT count(*)::text FROM ff_completion_event`,
	} {
		var s *string
		if err := c.Pool().QueryRow(context.Background(), q).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if s != nil {
			b.WriteString(*s)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestControlBadInputWritesNothing: every control operation refused for
// its input (malformed ids, a stale fence, a forged token, a signal to a
// missing waitpoint or a resumed execution, an untyped frame, a
// non-JSON summary patch, a missing or cancelled flow; a pending waitpoint
// without expiry or with a taken id, a suspend on a missing, foreign or
// extra-laden pending waitpoint or with malformed extras, children that
// are not members of the waiter's flow) leaves every table it writes
// exactly as it was.
func TestControlBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	c := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	id := newExec(t, c, &execOpts{lane: "bad"})
	r := claim(t, c, "bad")
	stale := r.Fence()
	stale.LeaseEpoch++
	flow := model.NewUUID()
	if err := c.CreateFlow(ctx, &postgres.CreateFlowParams{FlowID: flow, Kind: "k", NowMs: 1}); err != nil {
		t.Fatal(err)
	}
	member := newExec(t, c, &execOpts{lane: "bad-flow", flow: flow})
	if _, err := c.AddFlowMember(ctx, &postgres.AddFlowMemberParams{FlowID: flow, Child: member, NowMs: 1}); err != nil {
		t.Fatal(err)
	}
	rm := claim(t, c, "bad-flow")
	staleMember := rm.Fence()
	staleMember.LeaseEpoch++
	kid := newExec(t, c, &execOpts{lane: "bad-kid", flow: flow})
	if _, err := c.AddFlowMember(ctx, &postgres.AddFlowMemberParams{FlowID: flow, Child: kid, NowMs: 1}); err != nil {
		t.Fatal(err)
	}
	pw, err := c.CreatePendingWaitpoint(ctx, &postgres.CreatePendingWaitpointParams{ExecutionID: id, Fence: r.Fence(),
		WaitpointID: model.NewUUID().String(), WaitpointKey: "pk", ExpiresAt: time.Now().Add(time.Hour).UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	suspended := newExec(t, c, &execOpts{lane: "bad-susp"})
	rs := claim(t, c, "bad-susp")
	s, err := c.SuspendExecution(ctx, &postgres.SuspendParams{ExecutionID: suspended, Fence: rs.Fence(),
		SuspensionID: model.NewUUID().String(), WaitpointID: model.NewUUID().String(), WaitpointKey: "k",
		SignalNames: []string{"go"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendFrame(ctx, &postgres.AppendFrameParams{ExecutionID: id, Fence: r.Fence(), FrameType: "log",
		Payload: []byte("kept"), Mode: "summary"}); err == nil {
		t.Fatal("a summary frame that is not JSON was appended")
	}
	before := controlTables(t, c)

	forged := s.Token[:strings.LastIndexByte(s.Token, ':')+1] + strings.Repeat("ab", 32)
	pending := func(f postgres.LeaseFence, wp string, expires int64) func() error {
		return func() error {
			_, err := c.CreatePendingWaitpoint(ctx, &postgres.CreatePendingWaitpointParams{ExecutionID: id, Fence: f,
				WaitpointID: wp, WaitpointKey: "pk2", ExpiresAt: expires})
			return err
		}
	}
	later := time.Now().Add(time.Hour).UnixMilli()
	suspendOn := func(edit func(p *postgres.SuspendParams)) func() error {
		return func() error {
			p := &postgres.SuspendParams{ExecutionID: id, Fence: r.Fence(), SuspensionID: model.NewUUID().String(),
				WaitpointID: model.NewUUID().String(), WaitpointKey: "k"}
			edit(p)
			_, err := c.SuspendExecution(ctx, p)
			return err
		}
	}
	wait := func(exec model.ExecutionID, f postgres.LeaseFence, children ...model.ExecutionID) func() error {
		return func() error {
			_, err := c.WaitForChildren(ctx, &postgres.WaitForChildrenParams{ExecutionID: exec, Fence: f, FlowID: flow,
				Children: children, NowMs: 1})
			return err
		}
	}
	for name, call := range map[string]func() error{
		"pending waitpoint with a stale fence":   pending(stale, model.NewUUID().String(), later),
		"pending waitpoint without an expiry":    pending(r.Fence(), model.NewUUID().String(), 0),
		"pending waitpoint with a taken id":      pending(r.Fence(), pw.ID, later),
		"pending waitpoint with a malformed id":  pending(r.Fence(), "wp", later),
		"suspend on a missing pending waitpoint": suspendOn(func(p *postgres.SuspendParams) { p.PendingWaitpointID = model.NewUUID().String() }),
		"suspend on a pending waitpoint with extras": suspendOn(func(p *postgres.SuspendParams) {
			p.PendingWaitpointID = pw.ID
			p.Extra = []backend.WaitpointBinding{{WaitpointID: model.NewUUID().String(), WaitpointKey: "x"}}
		}),
		"suspend on another execution's pending waitpoint": func() error {
			_, err := c.SuspendExecution(ctx, &postgres.SuspendParams{ExecutionID: member, Fence: rm.Fence(),
				SuspensionID: model.NewUUID().String(), PendingWaitpointID: pw.ID})
			return err
		},
		"suspend with an extra key twice": suspendOn(func(p *postgres.SuspendParams) {
			p.Extra = []backend.WaitpointBinding{{WaitpointID: model.NewUUID().String(), WaitpointKey: "k"}}
		}),
		"suspend with an extra waitpoint's id taken": suspendOn(func(p *postgres.SuspendParams) {
			p.Extra = []backend.WaitpointBinding{{WaitpointID: pw.ID, WaitpointKey: "x"}}
		}),
		"suspend on a quorum beyond the waitpoints": suspendOn(func(p *postgres.SuspendParams) {
			p.Extra = []backend.WaitpointBinding{{WaitpointID: model.NewUUID().String(), WaitpointKey: "x"}}
			p.WaitpointQuorum = 3
		}),
		"signal to a pending waitpoint with a forged token": func() error {
			_, err := c.DeliverSignal(ctx, &postgres.DeliverSignalParams{ExecutionID: id, WaitpointID: pw.ID,
				Token: forged, SignalID: model.NewUUID().String(), Name: "go"})
			return err
		},
		"wait for children with a stale fence":      wait(member, staleMember, kid),
		"wait for a child outside the flow":         wait(member, rm.Fence(), parts.NewFlowExecutionID(flow)),
		"wait for children of a job outside a flow": wait(id, r.Fence(), kid),
		"wait for no children":                      wait(member, rm.Fence()),
		"cancel with a stale fence": func() error {
			return c.CancelLeasedExecution(ctx, &postgres.CancelLeasedExecutionParams{ExecutionID: id, Fence: stale})
		},
		"cancel a malformed id": func() error {
			return c.CancelLeasedExecution(ctx, &postgres.CancelLeasedExecutionParams{ExecutionID: "x", Fence: r.Fence()})
		},
		"cancel a missing flow": func() error {
			_, err := c.CancelFlow(ctx, &postgres.CancelFlowParams{FlowID: model.NewUUID()})
			return err
		},
		"suspend with a stale fence": func() error {
			_, err := c.SuspendExecution(ctx, &postgres.SuspendParams{ExecutionID: id, Fence: stale,
				SuspensionID: model.NewUUID().String(), WaitpointID: model.NewUUID().String(), WaitpointKey: "k"})
			return err
		},
		"suspend with a malformed waitpoint id": func() error {
			_, err := c.SuspendExecution(ctx, &postgres.SuspendParams{ExecutionID: id, Fence: r.Fence(),
				SuspensionID: model.NewUUID().String(), WaitpointID: "wp", WaitpointKey: "k"})
			return err
		},
		"suspend with an unknown timeout behavior": func() error {
			_, err := c.SuspendExecution(ctx, &postgres.SuspendParams{ExecutionID: id, Fence: r.Fence(),
				SuspensionID: model.NewUUID().String(), WaitpointID: model.NewUUID().String(), WaitpointKey: "k",
				TimeoutBehavior: "later"})
			return err
		},
		"signal with a forged token": func() error {
			_, err := c.DeliverSignal(ctx, &postgres.DeliverSignalParams{ExecutionID: suspended, WaitpointID: s.WaitpointID,
				Token: forged, SignalID: model.NewUUID().String(), Name: "go"})
			return err
		},
		"signal with another execution's id": func() error {
			_, err := c.DeliverSignal(ctx, &postgres.DeliverSignalParams{ExecutionID: id, WaitpointID: s.WaitpointID,
				Token: s.Token, SignalID: model.NewUUID().String(), Name: "go"})
			return err
		},
		"signal to a missing waitpoint": func() error {
			_, err := c.DeliverSignal(ctx, &postgres.DeliverSignalParams{ExecutionID: suspended, WaitpointID: model.NewUUID().String(),
				Token: s.Token, SignalID: model.NewUUID().String(), Name: "go"})
			return err
		},
		"signal without a name": func() error {
			_, err := c.DeliverSignal(ctx, &postgres.DeliverSignalParams{ExecutionID: suspended, WaitpointID: s.WaitpointID,
				Token: s.Token, SignalID: model.NewUUID().String()})
			return err
		},
		"append with a stale fence": func() error {
			_, err := c.AppendFrame(ctx, &postgres.AppendFrameParams{ExecutionID: id, Fence: stale, FrameType: "log"})
			return err
		},
		"append without a type": func() error {
			_, err := c.AppendFrame(ctx, &postgres.AppendFrameParams{ExecutionID: id, Fence: r.Fence()})
			return err
		},
		"append a summary that is not JSON": func() error {
			_, err := c.AppendFrame(ctx, &postgres.AppendFrameParams{ExecutionID: id, Fence: r.Fence(), FrameType: "s",
				Payload: []byte("{"), Mode: "summary"})
			return err
		},
	} {
		if err := call(); err == nil {
			t.Fatalf("%s: accepted", name)
		}
		if after := controlTables(t, c); after != before {
			t.Fatalf("%s wrote:\nbefore %s\nafter  %s", name, before, after)
		}
	}

	// The same refusals keep their codes.
	_, err = c.DeliverSignal(ctx, &postgres.DeliverSignalParams{ExecutionID: suspended, WaitpointID: s.WaitpointID,
		Token: forged, SignalID: model.NewUUID().String(), Name: "go"})
	if !errors.Is(err, postgres.CodeInvalidToken) {
		t.Fatalf("forged token: %v", err)
	}
	if _, err := c.CancelFlow(ctx, &postgres.CancelFlowParams{FlowID: flow}); err != nil {
		t.Fatal(err)
	}
	before = controlTables(t, c)
	if _, err := c.CancelFlow(ctx, &postgres.CancelFlowParams{FlowID: flow}); !errors.Is(err, postgres.CodeFlowAlreadyTerminal) {
		t.Fatalf("second flow cancel: %v", err)
	}
	if after := controlTables(t, c); after != before {
		t.Fatalf("a refused second flow cancel wrote:\nbefore %s\nafter  %s", before, after)
	}
}

// TestSummaryFrames: summary frames merge into the attempt's summary
// document (RFC 7396; "__ff_null__" sets a leaf to null, null deletes
// it), its version counts the patches, and frames appended in one
// millisecond keep increasing entry ids.
func TestSummaryFrames(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_700_000_000_000)
	c := pgtest.Client(t, postgres.ClientConfig{Now: func() time.Time { return now }})
	ctx := pgtest.Context(t, time.Minute)
	id := newExec(t, c, &execOpts{lane: "sum"})
	r, err := c.ClaimForWorker(ctx, &postgres.ClaimForWorkerParams{LaneID: "sum", WorkerID: "w", WorkerInstanceID: "wi",
		LeaseTTLMs: 3_600_000})
	if err != nil {
		t.Fatal(err)
	}
	if doc, v, err := c.ReadSummary(ctx, id, 0); err != nil || doc != "" || v != 0 {
		t.Fatalf("summary before any patch: %q %d %v", doc, v, err)
	}
	var ids []string
	for _, patch := range []string{`{"a":1,"b":{"c":2,"d":3}}`, `{"b":{"c":null},"e":"__ff_null__"}`, `{"a":2}`} {
		e, err := c.AppendFrame(ctx, &postgres.AppendFrameParams{ExecutionID: id, Fence: r.Fence(), FrameType: "summary",
			Payload: []byte(patch), Mode: "summary"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e)
	}
	if want := []string{"1700000000000-0", "1700000000000-1", "1700000000000-2"}; strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("entry ids %v, want %v", ids, want)
	}
	doc, v, err := c.ReadSummary(ctx, id, 0)
	if err != nil || doc != `{"a": 2, "b": {"d": 3}, "e": null}` || v != 3 {
		t.Fatalf("summary: %s version %d %v", doc, v, err)
	}
}
