package backendtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/edgegroup"
)

// inspectorOperations are the backend.Inspector operations the suite
// exercises.
var inspectorOperations = []string{"ListExecutions", "InspectExecution", "InspectFlow", "OperatorCancel", "OperatorSignal"}

func init() { Operations = append(Operations, inspectorOperations...) }

// runInspector registers the Inspector subtests: the same work leaves the
// same history on both backends.
func runInspector(sub func(string, func(*env)), opts Options) {
	sub("Inspect/Retried", func(e *env) { testInspectRetried(e, opts) })
	sub("Inspect/Reclaimed", testInspectReclaimed)
	sub("Inspect/Cancelled", testInspectCancelled)
	sub("Inspect/SuspendedResumed", testInspectSuspended)
	sub("Inspect/FlowMember", testInspectFlowMember)
	sub("Inspect/NotFound", testInspectNotFound)
}

func (e *env) inspect(id model.ExecutionID) *backend.ExecutionDetail {
	e.t.Helper()
	d, err := e.d.InspectExecution(e.ctx, id)
	if err != nil {
		e.t.Fatalf("inspect %s: %v", id, err)
	}
	return d
}

// history is a lease history as the console shows it: each event with
// its release reason and worker.
func history(d *backend.ExecutionDetail) []string {
	out := make([]string, 0, len(d.LeaseHistory))
	for _, f := range d.LeaseHistory {
		s := f.Fields["event"]
		if r := f.Fields["reason"]; r != "" {
			s += ":" + r
		}
		if w := f.Fields["worker_id"]; w != "" {
			s += "@" + w
		}
		out = append(out, s)
	}
	return out
}

// attemptErrors are the attempts' own errors, in attempt order.
func attemptErrors(d *backend.ExecutionDetail) []string {
	out := make([]string, len(d.Attempts))
	for i, a := range d.Attempts {
		out[i] = a.Error
	}
	return out
}

func (e *env) wantHistory(d *backend.ExecutionDetail, want ...string) {
	e.t.Helper()
	if got := history(d); !slices.Equal(got, want) {
		e.t.Fatalf("lease history of %s:\n got %s\nwant %s", d.ID, strings.Join(got, ", "), strings.Join(want, ", "))
	}
}

// list lists the env's lane in state.
func (e *env) list(state string) []backend.ExecutionRow {
	e.t.Helper()
	p, err := e.d.ListExecutions(e.ctx, &backend.ListExecutionsParams{Lane: e.lane, State: state})
	if err != nil {
		e.t.Fatalf("list %s executions of %s: %v", state, e.lane, err)
	}
	return p.Executions
}

// testInspectRetried: an execution failed once and retried to success
// shows two attempts, the error on the failed one only, each lease
// released with its reason; the listing finds it completed.
func testInspectRetried(e *env, opts Options) {
	p := e.spec()
	p.PolicyJSON = `{"retry_policy":{"max_retries":1,"backoff":{"type":"fixed","delay_ms":1}}}`
	id := e.create(p)
	c := e.mustClaim()
	r, err := e.d.FailExecution(e.ctx, &backend.FailExecutionParams{ExecutionID: id, Fence: c.Fence,
		FailureReason: "flaky", FailureCategory: "test"})
	if err != nil || !r.RetryScheduled {
		e.t.Fatalf("fail with a retry left: %+v %v", r, err)
	}
	if opts.PromoteDelayed == nil {
		e.t.Fatal("Options.PromoteDelayed is required")
	}
	if err := opts.PromoteDelayed(e.ctx, e.d, id, r.DelayUntil+1); err != nil {
		e.t.Fatalf("promote the retry: %v", err)
	}
	n := e.mustClaim()
	if n.Fence.AttemptIndex != 1 {
		e.t.Fatalf("retry claim: %+v, want attempt 1", n)
	}
	e.complete(n, []byte("out"))
	d := e.inspect(id)
	if d.Core["public_state"] != model.PublicCompleted || d.Result != "out" || d.Payload != "in" {
		e.t.Fatalf("detail of %s: core %v result %q payload %q", id, d.Core, d.Result, d.Payload)
	}
	if got := attemptErrors(d); !slices.Equal(got, []string{"flaky", ""}) {
		e.t.Fatalf("attempt errors of %s: %q, want the failure on attempt 0 only", id, got)
	}
	e.wantHistory(d, "acquired@bt-worker", "released:failed_retry_scheduled@bt-worker", "acquired@bt-worker", "released:completed@bt-worker")
	if _, ok := d.Core["delay_until"]; ok && d.Core["delay_until"] != "" {
		e.t.Fatalf("core of %s keeps delay_until %q after the delay", id, d.Core["delay_until"])
	}
	rows := e.list(model.PublicCompleted)
	if len(rows) != 1 || rows[0].ID != string(id) || rows[0].Attempts != 2 || rows[0].State != model.PublicCompleted {
		e.t.Fatalf("completed executions of %s: %+v", e.lane, rows)
	}
	if rows := e.list(model.PublicFailed); len(rows) != 0 {
		e.t.Fatalf("failed executions of %s: %+v", e.lane, rows)
	}
}

// testInspectReclaimed: a crashed worker's lease is reclaimed by another;
// the history shows the lease expired with the crashed worker and
// reclaimed by the other.
func testInspectReclaimed(e *env) {
	id := e.create(e.spec())
	e.crash("a")
	rs := e.claimWithin(e.worker("b", ttl), 1, 20*time.Second)
	if len(rs) != 1 {
		e.t.Fatalf("the expired lease was not reclaimed within 20 s")
	}
	e.complete(rs[0], nil)
	d := e.inspect(id)
	if len(d.Attempts) != 2 || d.Attempts[1].Error != "" {
		e.t.Fatalf("attempts of %s: %+v", id, d.Attempts)
	}
	e.wantHistory(d, "acquired@bt-a", "expired@bt-a", "reclaimed@bt-b", "released:completed@bt-b")
}

// testInspectCancelled: an operator cancel of a leased execution releases
// its lease as cancelled and ends its attempt with the cancel's reason; a
// second cancel is refused by its state.
func testInspectCancelled(e *env) {
	id := e.create(e.spec())
	e.mustClaim()
	r, err := e.d.OperatorCancel(e.ctx, id, "")
	if err != nil || r.ID != string(id) || r.Action != "cancel" || r.Detail["reason"] != "operator_cancel" {
		e.t.Fatalf("operator cancel: %+v %v", r, err)
	}
	d := e.inspect(id)
	if d.Core["public_state"] != model.PublicCancelled || d.Core["cancellation_reason"] != "operator_cancel" ||
		d.Core["cancelled_by"] != "operator_override" {
		e.t.Fatalf("core of a cancelled execution: %v", d.Core)
	}
	if got := attemptErrors(d); !slices.Equal(got, []string{"cancelled: operator_cancel"}) {
		e.t.Fatalf("attempt errors of %s: %q, want the cancel's reason", id, got)
	}
	e.wantHistory(d, "acquired@bt-worker", "released:cancelled@bt-worker")
	_, err = e.d.OperatorCancel(e.ctx, id, "again")
	wantErr(e.t, "cancel a cancelled execution", err, backend.ErrConflict)
}

// testInspectSuspended: a suspended execution shows its waitpoint without
// the token; an operator's signal resumes it, and the history shows the
// suspend's release and the resumed claim.
func testInspectSuspended(e *env) {
	id := e.create(e.spec())
	c := e.mustClaim()
	s := e.suspend(c, false, "go")
	d := e.inspect(id)
	if d.Core["lifecycle_phase"] != model.PhaseSuspended {
		e.t.Fatalf("core of a suspended execution: %v", d.Core)
	}
	i := slices.IndexFunc(d.Waitpoints, func(w backend.WaitpointDetail) bool { return w.ID == s.WaitpointID })
	if i < 0 || d.Waitpoints[i].Fields["waitpoint_token"] != "" || strings.Contains(fmt.Sprint(d.Waitpoints), s.Token) {
		e.t.Fatalf("waitpoints of %s: %+v, want %s without its token", id, d.Waitpoints, s.WaitpointID)
	}
	r, err := e.d.OperatorSignal(e.ctx, id, &backend.OperatorSignalParams{Name: "go"})
	if err != nil || r.Detail["effect"] != backend.EffectResumed || r.Detail["waitpoint_id"] != s.WaitpointID {
		e.t.Fatalf("operator signal: %+v %v", r, err)
	}
	n := e.mustClaim()
	e.complete(n, nil)
	d = e.inspect(id)
	if got := attemptErrors(d); len(got) != n.Fence.AttemptIndex+1 || slices.ContainsFunc(got, func(s string) bool { return s != "" }) {
		e.t.Fatalf("attempt errors of %s: %q (resumed as attempt %d)", id, got, n.Fence.AttemptIndex)
	}
	e.wantHistory(d, "acquired@bt-worker", "released:suspend@bt-worker", "acquired:claim_resumed@bt-worker",
		"released:completed@bt-worker")
	_, err = e.d.OperatorSignal(e.ctx, id, &backend.OperatorSignalParams{Name: "go"})
	wantErr(e.t, "signal an ended execution", err, backend.ErrConflict)
}

// testInspectFlowMember: a member shows its flow and the edge into it;
// the flow shows both members and the edge, unresolved; the flow filter
// lists its members.
func testInspectFlowMember(e *env) {
	flow := e.newFlow()
	up, down := e.onFlow(flow, false), e.onFlow(flow, false)
	if err := e.addMember(flow, up, "", 0); err != nil {
		e.t.Fatal(err)
	}
	if err := e.addMember(flow, down, edgegroup.KindAllOf, 0, up); err != nil {
		e.t.Fatal(err)
	}
	d := e.inspect(down)
	if d.Flow == nil || d.Flow.FlowID != flow.String() || len(d.Flow.Upstream) != 1 ||
		d.Flow.Upstream[0]["upstream_execution_id"] != string(up) {
		e.t.Fatalf("flow membership of %s: %+v", down, d.Flow)
	}
	v, err := e.d.InspectFlow(e.ctx, flow)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(v.Nodes) != 2 || len(v.Edges) != 1 || v.Edges[0].Upstream != string(up) || v.Edges[0].Downstream != string(down) ||
		v.Edges[0].Resolution != "unsatisfied" {
		e.t.Fatalf("flow %s: nodes %+v edges %+v", flow, v.Nodes, v.Edges)
	}
	p, err := e.d.ListExecutions(e.ctx, &backend.ListExecutionsParams{Flow: flow.String()})
	if err != nil {
		e.t.Fatal(err)
	}
	ids := []string{}
	for _, r := range p.Executions {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	want := []string{string(up), string(down)}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		e.t.Fatalf("members of %s listed: %v, want %v", flow, ids, want)
	}
}

// testInspectNotFound: unknown executions, flows and lanes are
// ErrNotFound, a bad state ErrInvalidInput.
func testInspectNotFound(e *env) {
	_, err := e.d.InspectExecution(e.ctx, e.d.Partitions().NewSoloExecutionID(e.lane))
	wantErr(e.t, "inspect an unknown execution", err, backend.ErrNotFound)
	_, err = e.d.InspectFlow(e.ctx, model.NewUUID())
	wantErr(e.t, "inspect an unknown flow", err, backend.ErrNotFound)
	_, err = e.d.ListExecutions(e.ctx, &backend.ListExecutionsParams{Lane: "no-such-" + e.lane})
	wantErr(e.t, "list an unknown lane", err, backend.ErrNotFound)
	_, err = e.d.ListExecutions(e.ctx, &backend.ListExecutionsParams{State: "sleeping"})
	wantErr(e.t, "list an unknown state", err, backend.ErrInvalidInput)
}

// inspectorUnmigrated are RunUnmigrated's cases of the Inspector
// operations the suite exercises.
func inspectorUnmigrated(ctx context.Context, d backend.Driver, id model.ExecutionID) map[string]func() error {
	return map[string]func() error{
		"ListExecutions": func() error {
			_, err := d.ListExecutions(ctx, &backend.ListExecutionsParams{})
			return err
		},
		"InspectExecution": func() error {
			_, err := d.InspectExecution(ctx, id)
			return err
		},
		"InspectFlow": func() error {
			_, err := d.InspectFlow(ctx, model.NewUUID())
			return err
		},
		"OperatorCancel": func() error {
			_, err := d.OperatorCancel(ctx, id, "")
			return err
		},
		"OperatorSignal": func() error {
			_, err := d.OperatorSignal(ctx, id, &backend.OperatorSignalParams{Name: "s"})
			return err
		},
	}
}
