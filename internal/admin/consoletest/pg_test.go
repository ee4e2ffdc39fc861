package consoletest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// getJSON sends an authorized request without a body and decodes the
// answer into out, which it zeroes first.
func getJSON[T any](t *testing.T, method, u string, out *T) int {
	t.Helper()
	return sendJSON(t, method, u, "", out)
}

// sendJSON sends an authorized request with body (none when empty) and
// decodes the answer into out, which it zeroes first.
func sendJSON[T any](t *testing.T, method, u, body string, out *T) int {
	t.Helper()
	var zero T
	*out = zero
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %s: %v", method, u, b, err)
	}
	return resp.StatusCode
}

// TestPGConsole serves the console API over a real Postgres deployment
// that an SDK worker filled: listing, detail, lanes, workers, a flow, an
// operator's cancel and signal, and the refusals (bad ids, unknown lanes,
// a signal to an execution not suspended, writes the backend lacks).
func TestPGConsole(t *testing.T) {
	pc := pgtest.Client(t, postgres.ClientConfig{})
	ctx := pgtest.Context(t, time.Minute)
	c, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: pc, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "pgw", InstanceID: "pgw-1", Lanes: []string{"pg-a"},
		Capabilities: []string{"cpu"}, Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(ctx) })
	create := func(spec sdk.ExecutionSpec) model.ExecutionID {
		t.Helper()
		id, err := c.CreateExecution(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	claim := func(want model.ExecutionID) *sdk.Lease {
		t.Helper()
		l, err := w.ClaimNext(ctx)
		if err != nil || l == nil || l.ID != want {
			t.Fatalf("claim: %v %v, want %s", l, err, want)
		}
		return l
	}
	done := create(sdk.ExecutionSpec{Lane: "pg-a", Kind: "resize", Payload: []byte(`{"n":1}`)})
	if err := claim(done).Complete(ctx, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	failed := create(sdk.ExecutionSpec{Lane: "pg-a", Kind: "resize"})
	if _, err := claim(failed).Fail(ctx, "pg handler blew up", "handler", false); err != nil {
		t.Fatal(err)
	}
	active := create(sdk.ExecutionSpec{Lane: "pg-a", Kind: "resize"})
	claim(active)
	waiting := create(sdk.ExecutionSpec{Lane: "pg-a", Kind: "resize", Priority: 3})
	delayed := create(sdk.ExecutionSpec{Lane: "pg-b", Kind: "report", Delay: time.Hour})
	// Suspended on a signal an operator sends; a worker of its own lane.
	sw, err := sdk.Connect(ctx, pc, sdk.WorkerConfig{WorkerID: "pgs", InstanceID: "pgs-1", Lanes: []string{"pg-s"},
		Logger: pgtest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sw.Close(ctx) })
	suspended := create(sdk.ExecutionSpec{Lane: "pg-s", Kind: "approve"})
	sl, err := sw.ClaimNext(ctx)
	if err != nil || sl == nil || sl.ID != suspended {
		t.Fatalf("claim the execution to suspend: %v %v", sl, err)
	}
	if _, err := sl.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approved"}}); err != nil {
		t.Fatal(err)
	}

	// A flow of two members, root -> child, written as the engine does.
	flow := model.NewUUID()
	part := pc.Partitions().FlowPartition(flow)
	root, child := model.NewExecutionID(part, model.NewUUID()), model.NewExecutionID(part, model.NewUUID())
	for _, id := range []model.ExecutionID{root, child} {
		if _, err := pc.CreateExecution(ctx, &postgres.CreateExecutionParams{ExecutionID: id, FlowID: flow, LaneID: "pg-flow",
			Namespace: "default", ExecutionKind: "step"}); err != nil {
			t.Fatal(err)
		}
	}
	u := func(id model.ExecutionID) [16]byte { return [16]byte(model.MustParseUUID(id.UUIDString())) }
	if _, err := pc.Pool().Exec(ctx, `INSERT INTO ff_flow_core (partition_key, flow_id, public_flow_state, created_at_ms, raw_fields)
VALUES ($1, $2, 'open', 1, '{"flow_kind":"pipeline"}')`, int16(part.Index), [16]byte(flow)); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Pool().Exec(ctx, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy)
VALUES ($1, $2, $3, $4, $5, '{"dependency_kind":"success_only"}')`, int16(part.Index), [16]byte(flow),
		[16]byte(model.NewUUID()), u(root), u(child)); err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(admin.NewConsoleHandler(admin.ConsoleConfig{Backend: admin.NewConsole(postgres.NewDriver(pc)), AdminToken: "tok",
		Logger: pgtest.Logger()}))
	t.Cleanup(srv.Close)
	base := srv.URL

	var p admin.ExecutionPage
	if code := getJSON(t, "GET", base+"/api/executions?lane=pg-a", &p); code != 200 || len(p.Executions) != 4 {
		t.Fatalf("list lane pg-a: %d %+v", code, p)
	}
	states := map[string]string{}
	for _, r := range p.Executions {
		states[r.ID] = r.State
	}
	if states[string(done)] != "completed" || states[string(failed)] != "failed" || states[string(active)] != "running" || states[string(waiting)] != "waiting" {
		t.Fatalf("states %v", states)
	}
	getJSON(t, "GET", base+"/api/executions?state=delayed", &p)
	if len(p.Executions) != 1 || p.Executions[0].ID != string(delayed) {
		t.Fatalf("state=delayed: %+v", p)
	}
	getJSON(t, "GET", base+"/api/executions?limit=1&order=desc", &p)
	if len(p.Executions) != 1 || p.Executions[0].ID != string(child) {
		t.Fatalf("newest first: %+v, want %s", p, child)
	}
	getJSON(t, "GET", base+"/api/executions?limit=2", &p)
	if len(p.Executions) != 2 || p.NextCursor != "2" {
		t.Fatalf("page 1: %+v", p)
	}
	getJSON(t, "GET", base+"/api/executions?limit=5&cursor=5", &p)
	if len(p.Executions) != 3 || p.NextCursor != "" {
		t.Fatalf("last page: %+v", p)
	}

	var d admin.ExecutionDetail
	if code := getJSON(t, "GET", base+"/api/executions/"+string(failed), &d); code != 200 {
		t.Fatalf("detail: %d", code)
	}
	if d.Core["public_state"] != "failed" || len(d.Attempts) != 1 || !strings.Contains(d.Attempts[0].Error, "pg handler blew up") {
		t.Fatalf("failed detail: core %v attempts %+v", d.Core, d.Attempts)
	}
	getJSON(t, "GET", base+"/api/executions/"+string(done), &d)
	if d.Payload != `{"n":1}` || d.Result != "ok" {
		t.Fatalf("payload/result: %q %q", d.Payload, d.Result)
	}
	getJSON(t, "GET", base+"/api/executions/"+string(active), &d)
	if d.Lease["worker_instance_id"] != "pgw-1" {
		t.Fatalf("lease: %+v", d.Lease)
	}
	getJSON(t, "GET", base+"/api/executions/"+string(child), &d)
	if d.Flow == nil || d.Flow.FlowID != flow.String() || len(d.Flow.Upstream) != 1 || d.Flow.Upstream[0]["upstream_execution_id"] != string(root) {
		t.Fatalf("flow membership: %+v", d.Flow)
	}

	var f admin.FlowView
	if code := getJSON(t, "GET", base+"/api/flows/"+flow.String(), &f); code != 200 || len(f.Nodes) != 2 || len(f.Edges) != 1 ||
		f.Edges[0].Upstream != string(root) || f.Edges[0].Downstream != string(child) || f.Core["flow_kind"] != "pipeline" {
		t.Fatalf("flow: %d %+v", code, f)
	}
	if f.Edges[0].Resolution != "unsatisfied" || f.SummaryState != "" {
		t.Fatalf("edge before its upstream ended: %+v, summary %q", f.Edges[0], f.SummaryState)
	}
	// The upstream's dispatched completion resolves the edge; the
	// projector's summary names the members' state.
	if _, err := pc.Pool().Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, occurred_at_ms, dispatched_at_ms)
VALUES ($1, $2, $3, 'failed', 1, 2), ($1, $2, $3, 'success', 3, 4), ($1, $2, $3, 'failed', 5, NULL)`, int16(part.Index), u(root), [16]byte(flow)); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Pool().Exec(ctx, `INSERT INTO ff_flow_summary (partition_key, flow_id, public_flow_state, last_summary_update_at)
VALUES ($1, $2, 'running', 1)`, int16(part.Index), [16]byte(flow)); err != nil {
		t.Fatal(err)
	}
	getJSON(t, "GET", base+"/api/flows/"+flow.String(), &f)
	if f.Edges[0].Resolution != "satisfied" || f.SummaryState != "running" {
		t.Fatalf("edge after the upstream's latest dispatched success: %+v, summary %q", f.Edges[0], f.SummaryState)
	}
	if _, err := pc.Pool().Exec(ctx, `DELETE FROM ff_completion_event WHERE execution_id = $1`, u(root)); err != nil {
		t.Fatal(err)
	}
	getJSON(t, "GET", base+"/api/executions?flow="+flow.String(), &p)
	if len(p.Executions) != 2 {
		t.Fatalf("flow members: %+v", p)
	}

	var l struct{ Lanes []admin.LaneCounts }
	getJSON(t, "GET", base+"/api/lanes", &l)
	counts := map[string]admin.LaneCounts{}
	for _, x := range l.Lanes {
		counts[x.Lane] = x
	}
	if a := counts["pg-a"]; a.Total != 4 || a.Counts["terminal"] != 2 || a.Counts["active"] != 1 || a.Counts["eligible"] != 1 ||
		counts["pg-b"].Counts["delayed"] != 1 {
		t.Fatalf("lanes %+v", l)
	}
	var ws struct{ Workers []admin.WorkerInfo }
	getJSON(t, "GET", base+"/api/workers", &ws)
	byInstance := map[string]admin.WorkerInfo{}
	for _, x := range ws.Workers {
		byInstance[x.InstanceID] = x
	}
	if wi := byInstance["pgw-1"]; len(ws.Workers) != 2 || !wi.Alive || wi.Leases != 1 || byInstance["pgs-1"].Leases != 0 {
		t.Fatalf("workers %+v", ws)
	}

	var e admin.APIError
	for _, tc := range []struct {
		method, path string
		code         int
		says         string
	}{
		{"GET", "/api/executions/bad", 400, "execution id"},
		{"GET", "/api/executions/{fp:1}:" + model.NewUUID().String(), 404, "execution"},
		{"GET", "/api/executions?lane=nope", 404, `unknown lane "nope"`},
		{"GET", "/api/executions?state=sleepy", 400, "unknown state"},
		{"GET", "/api/flows/" + model.NewUUID().String(), 404, "flow"},
		{"POST", "/api/executions/" + string(done) + "/cancel", 409, "execution_not_active"},
		{"POST", "/api/executions/{fp:1}:" + model.NewUUID().String() + "/cancel", 404, "execution"},
		{"POST", "/api/executions/" + string(waiting) + "/replay", 409, "execution_not_terminal"},
		{"POST", "/api/lanes/pg-a/pause", 501, "no lane state"},
	} {
		if code := getJSON(t, tc.method, base+tc.path, &e); code != tc.code || !strings.Contains(e.Error, tc.says) {
			t.Errorf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, code, e.Error, tc.code, tc.says)
		}
	}

	// An operator's writes: a signal to a suspended execution resumes it
	// (the console reads the waitpoint's token itself), a second signal
	// finds it no longer suspended; a waiting execution's priority
	// changes (a leased one's is refused), a completed execution replays
	// to waiting, and a cancel of a waiting execution ends it.
	var a admin.ActionResult
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(waiting)+"/signal", `{"name":"approved"}`, &e); code != 409 ||
		!strings.Contains(e.Error, "no current waitpoint") {
		t.Fatalf("signal to an execution not suspended: %d %q", code, e.Error)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(suspended)+"/signal", `{"name":"approved","payload":"{\"ok\":true}"}`, &a); code != 200 ||
		a.Detail["effect"] != "resume_condition_satisfied" || a.Detail["duplicate"] != false {
		t.Fatalf("signal to a suspended execution: %d %+v", code, a)
	}
	st, err := c.State(ctx, suspended)
	if err != nil || st.PublicState != model.PublicResumable || st.LifecyclePhase != model.PhaseRunnable || st.EligibilityState != model.EligibleNow {
		t.Fatalf("after the operator's signal: %+v %v, want %s and eligible", st, err, model.PublicResumable)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(suspended)+"/signal", `{"name":"approved"}`, &e); code != 409 {
		t.Fatalf("second signal: %d %q, want 409", code, e.Error)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(suspended)+"/signal", `{"name":"approved","waitpoint_id":"nope"}`, &e); code != 400 {
		t.Fatalf("signal to a malformed waitpoint id: %d %q, want 400", code, e.Error)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(waiting)+"/priority", `{"priority":7}`, &a); code != 200 ||
		a.Detail["old"] != float64(3) || a.Detail["new"] != float64(7) {
		t.Fatalf("priority of a waiting execution: %d %+v", code, a)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(active)+"/priority", `{"priority":7}`, &e); code != 409 ||
		!strings.Contains(e.Error, "execution_not_eligible") {
		t.Fatalf("priority of a leased execution: %d %q, want 409", code, e.Error)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(waiting)+"/priority", `{"priority":9001}`, &e); code != 400 {
		t.Fatalf("priority out of range: %d %q, want 400", code, e.Error)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(done)+"/replay", ``, &a); code != 200 ||
		a.Detail["replay_count"] != float64(1) || a.Detail["public_state"] != model.PublicWaiting {
		t.Fatalf("replay of a completed execution: %d %+v", code, a)
	}
	if st, err := c.State(ctx, done); err != nil || st.PublicState != model.PublicWaiting || st.LifecyclePhase != model.PhaseRunnable {
		t.Fatalf("after the operator's replay: %+v %v", st, err)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(waiting)+"/cancel", `{"reason":"operator says no"}`, &a); code != 200 ||
		a.Detail["from"] != model.PhaseRunnable || a.Detail["reason"] != "operator says no" {
		t.Fatalf("cancel of a waiting execution: %d %+v", code, a)
	}
	if st, err := c.State(ctx, waiting); err != nil || st.PublicState != model.PublicCancelled {
		t.Fatalf("after the operator's cancel: %+v %v", st, err)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(child)+"/replay", ``, &e); code != 409 {
		t.Fatalf("replay of a flow member not ended: %d %q, want 409", code, e.Error)
	}
	if _, err := pc.Pool().Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'completed'
 WHERE partition_key = $1 AND execution_id = $2`, int16(part.Index), u(root)); err != nil {
		t.Fatal(err)
	}
	if code := sendJSON(t, "POST", base+"/api/executions/"+string(root)+"/replay", ``, &e); code != 501 ||
		!strings.Contains(e.Error, "downstream flow members") {
		t.Fatalf("replay of an ended flow member with a downstream: %d %q, want 501", code, e.Error)
	}
}
