package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/admin/consoletest"
	"github.com/fabric-host/fabric/model"
)

const testToken = "s3cret-admin-token"

// call sends method to base+path with an optional bearer token and JSON
// body, and decodes the JSON answer into out (when non-nil).
func call(t *testing.T, method, u, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: Content-Type %q, body %s", method, u, ct, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, u, b, err)
		}
	}
	return resp.StatusCode
}

func wantErr(t *testing.T, method, u, token string, body any, code int, contains string) {
	t.Helper()
	var e admin.APIError
	if got := call(t, method, u, token, body, &e); got != code || !strings.Contains(e.Error, contains) || e.Status != code {
		t.Fatalf("%s %s: got %d %+v, want %d containing %q", method, u, got, e, code, contains)
	}
}

func consoleServer(t *testing.T, token string) (string, *consoletest.Seeded) {
	t.Helper()
	vc := valkeytest.Client(t)
	s := consoletest.Seed(t, vc)
	base := startServer(t, admin.ServerConfig{Backend: vc, AdminToken: token})
	return base, s
}

func TestConsoleAPIReads(t *testing.T) {
	base, s := consoleServer(t, testToken)

	t.Run("list by lane and state", func(t *testing.T) {
		var p admin.ExecutionPage
		if c := call(t, "GET", base+"/api/executions?lane="+consoletest.LaneA, "", nil, &p); c != 200 {
			t.Fatalf("status %d", c)
		}
		got := map[string]string{}
		for _, r := range p.Executions {
			got[r.ID] = r.State
			if r.Lane != consoletest.LaneA {
				t.Fatalf("lane filter leaked %+v", r)
			}
		}
		want := map[model.ExecutionID]string{s.Completed: "completed", s.Failed: "failed", s.Suspended: "suspended",
			s.Eligible: "waiting", s.Delayed: "delayed", s.Completed2: "completed"}
		for id, st := range want {
			if got[string(id)] != st {
				t.Errorf("%s: state %q, want %q (listing %v)", id, got[string(id)], st, got)
			}
		}
		if len(p.Executions) != len(want) {
			t.Errorf("listed %d, want %d: %v", len(p.Executions), len(want), got)
		}
		var failed admin.ExecutionPage
		call(t, "GET", base+"/api/executions?state=failed", "", nil, &failed)
		if len(failed.Executions) != 1 || failed.Executions[0].ID != string(s.Failed) {
			t.Fatalf("state=failed: %+v", failed)
		}
	})

	t.Run("paging visits every execution once", func(t *testing.T) {
		seen := map[string]int{}
		cursor, pages := "", 0
		for {
			var p admin.ExecutionPage
			q := url.Values{"limit": {"2"}, "cursor": {cursor}}
			if c := call(t, "GET", base+"/api/executions?"+q.Encode(), "", nil, &p); c != 200 {
				t.Fatalf("status %d", c)
			}
			if len(p.Executions) > 2 {
				t.Fatalf("page of %d with limit 2", len(p.Executions))
			}
			for _, r := range p.Executions {
				seen[r.ID]++
			}
			pages++
			if p.NextCursor == "" {
				break
			}
			if pages > 10 {
				t.Fatal("paging does not end")
			}
			cursor = p.NextCursor
		}
		if len(seen) != 9 {
			t.Fatalf("paging saw %d executions, want 9: %v", len(seen), seen)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("%s seen %d times", id, n)
			}
		}
	})

	t.Run("order=desc is the listing reversed", func(t *testing.T) {
		var asc, desc admin.ExecutionPage
		call(t, "GET", base+"/api/executions?lane="+consoletest.LaneA, "", nil, &asc)
		call(t, "GET", base+"/api/executions?order=desc&lane="+consoletest.LaneA, "", nil, &desc)
		if len(asc.Executions) != 6 || len(desc.Executions) != 6 {
			t.Fatalf("asc %d, desc %d", len(asc.Executions), len(desc.Executions))
		}
		for i := range asc.Executions {
			if asc.Executions[i].ID != desc.Executions[len(desc.Executions)-1-i].ID {
				t.Fatalf("desc is not asc reversed:\n%+v\n%+v", asc.Executions, desc.Executions)
			}
		}
		wantErr(t, "GET", base+"/api/executions?order=sideways", "", nil, 400, "order")
	})

	t.Run("filtered paging stops inside a chunk", func(t *testing.T) {
		var got []string
		cursor := ""
		for range 6 {
			var p admin.ExecutionPage
			q := url.Values{"limit": {"1"}, "state": {"completed"}, "cursor": {cursor}}
			if c := call(t, "GET", base+"/api/executions?"+q.Encode(), "", nil, &p); c != 200 {
				t.Fatalf("status %d", c)
			}
			for _, r := range p.Executions {
				got = append(got, r.ID)
			}
			if cursor = p.NextCursor; cursor == "" {
				break
			}
		}
		want := map[string]bool{string(s.Completed): true, string(s.Completed2): true, string(s.Root): true}
		if len(got) != 3 || !want[got[0]] || !want[got[1]] || !want[got[2]] || got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
			t.Fatalf("completed, one per page: %v", got)
		}
	})

	t.Run("list a flow's members", func(t *testing.T) {
		var p admin.ExecutionPage
		call(t, "GET", base+"/api/executions?flow="+s.Flow.String(), "", nil, &p)
		if len(p.Executions) != 3 {
			t.Fatalf("flow members: %+v", p)
		}
		call(t, "GET", base+"/api/executions?flow="+s.Flow.String()+"&state=active", "", nil, &p)
		if len(p.Executions) != 1 || p.Executions[0].ID != string(s.Active) {
			t.Fatalf("flow active member: %+v", p)
		}
	})

	t.Run("execution detail", func(t *testing.T) {
		var d admin.ExecutionDetail
		if c := call(t, "GET", base+"/api/executions/"+string(s.Failed), "", nil, &d); c != 200 {
			t.Fatalf("status %d", c)
		}
		if d.Core["public_state"] != "failed" || d.Payload != `{"image":"broken.png"}` || d.PayloadBytes != int64(len(d.Payload)) {
			t.Fatalf("core/payload: %+v", d)
		}
		if len(d.Attempts) != 1 || !strings.Contains(d.Attempts[0].Error, "decoder exploded") {
			t.Fatalf("attempts: %+v", d.Attempts)
		}
		events := []string{}
		for _, f := range d.LeaseHistory {
			events = append(events, f.Fields["event"])
		}
		if strings.Join(events, ",") != "acquired,released" {
			t.Fatalf("lease history %v", events)
		}
		var sus admin.ExecutionDetail
		call(t, "GET", base+"/api/executions/"+string(s.Suspended), "", nil, &sus)
		if len(sus.Waitpoints) != 1 || sus.Waitpoints[0].Fields["execution_id"] != string(s.Suspended) {
			t.Fatalf("waitpoints: %+v", sus.Waitpoints)
		}
		if _, leaked := sus.Waitpoints[0].Fields["waitpoint_token"]; leaked {
			t.Fatal("the waitpoint token reached the API")
		}
		var mem admin.ExecutionDetail
		call(t, "GET", base+"/api/executions/"+string(s.Left), "", nil, &mem)
		if mem.Flow == nil || mem.Flow.FlowID != s.Flow.String() || len(mem.Flow.Upstream) != 1 ||
			mem.Flow.Upstream[0]["upstream_execution_id"] != string(s.Root) {
			t.Fatalf("flow membership: %+v", mem.Flow)
		}
		if mem.Lease["worker_instance_id"] != s.Worker {
			t.Fatalf("lease: %+v", mem.Lease)
		}
	})

	t.Run("flow", func(t *testing.T) {
		var f admin.FlowView
		if c := call(t, "GET", base+"/api/flows/"+s.Flow.String(), "", nil, &f); c != 200 {
			t.Fatalf("status %d", c)
		}
		states := map[string]string{}
		for _, n := range f.Nodes {
			states[n.ID] = n.State
		}
		if states[string(s.Root)] != "completed" || states[string(s.Left)] != "active" || states[string(s.Right)] != "waiting" {
			t.Fatalf("node states %v", states)
		}
		if len(f.Edges) != 2 {
			t.Fatalf("edges %+v", f.Edges)
		}
		for _, e := range f.Edges {
			if e.Upstream != string(s.Root) || (e.Downstream != string(s.Left) && e.Downstream != string(s.Right)) ||
				e.State != "pending" || e.Resolution != "satisfied" {
				// FlowFabric leaves edge_state pending; the resolution
				// is the downstream's dep:<edge> state.
				t.Fatalf("edge %+v", e)
			}
		}
	})

	t.Run("lanes and workers", func(t *testing.T) {
		var l struct{ Lanes []admin.LaneCounts }
		call(t, "GET", base+"/api/lanes", "", nil, &l)
		if len(l.Lanes) != 2 || l.Lanes[0].Lane != consoletest.LaneA || l.Lanes[0].Total != 6 || l.Lanes[0].Counts["terminal"] != 3 ||
			l.Lanes[1].Counts["active"] != 1 {
			t.Fatalf("lanes %+v", l)
		}
		var w struct{ Workers []admin.WorkerInfo }
		call(t, "GET", base+"/api/workers", "", nil, &w)
		if len(w.Workers) != 1 || w.Workers[0].InstanceID != s.Worker || !w.Workers[0].Alive || w.Workers[0].Leases != 1 ||
			w.Workers[0].LastHeartbeatMs == 0 || strings.Join(w.Workers[0].Capabilities, ",") != "cpu" {
			t.Fatalf("workers %+v", w)
		}
	})

	t.Run("bad ids and unknown lanes", func(t *testing.T) {
		wantErr(t, "GET", base+"/api/executions/not-an-id", "", nil, 400, "execution id")
		wantErr(t, "GET", base+"/api/executions/{fp:3}:00000000-0000-4000-8000-000000000000", "", nil, 404, "execution")
		wantErr(t, "GET", base+"/api/executions?lane=nope", "", nil, 404, `unknown lane "nope"`)
		wantErr(t, "GET", base+"/api/executions?state=sleepy", "", nil, 400, `unknown state "sleepy"`)
		wantErr(t, "GET", base+"/api/executions?limit=0", "", nil, 400, "limit")
		wantErr(t, "GET", base+"/api/executions?cursor=x", "", nil, 400, "cursor")
		wantErr(t, "GET", base+"/api/flows/xyz", "", nil, 400, "flow id")
		wantErr(t, "GET", base+"/api/flows/"+model.NewUUID().String(), "", nil, 404, "flow")
		wantErr(t, "GET", base+"/api/nothing", "", nil, 404, "no API route")
	})
}

func TestConsoleAPIWrites(t *testing.T) {
	base, s := consoleServer(t, testToken)
	ex := func(id model.ExecutionID, action string) string {
		return base + "/api/executions/" + url.PathEscape(string(id)) + "/" + action
	}
	state := func(id model.ExecutionID) string {
		var d admin.ExecutionDetail
		call(t, "GET", base+"/api/executions/"+string(id), "", nil, &d)
		return d.Core["public_state"]
	}

	t.Run("refused without the token", func(t *testing.T) {
		wantErr(t, "POST", ex(s.Eligible, "cancel"), "", nil, 403, "admin token required")
		wantErr(t, "POST", ex(s.Eligible, "cancel"), "wrong", nil, 403, "refused")
		if st := state(s.Eligible); st != "waiting" {
			t.Fatalf("a refused cancel changed the state to %s", st)
		}
		noToken := startServer(t, admin.ServerConfig{Backend: s.VC})
		wantErr(t, "POST", noToken+"/api/executions/"+string(s.Eligible)+"/cancel", testToken, nil, 403, "writes are disabled")
	})

	t.Run("priority", func(t *testing.T) {
		var r admin.ActionResult
		if c := call(t, "POST", ex(s.Eligible, "priority"), testToken, map[string]any{"priority": 700}, &r); c != 200 {
			t.Fatalf("status %d %+v", c, r)
		}
		var d admin.ExecutionDetail
		call(t, "GET", base+"/api/executions/"+string(s.Eligible), "", nil, &d)
		if d.Core["priority"] != "700" || r.Detail["old"] != float64(5) {
			t.Fatalf("priority %s, result %+v", d.Core["priority"], r)
		}
		wantErr(t, "POST", ex(s.Eligible, "priority"), testToken, map[string]any{"priority": 9001}, 400, "priority must be")
		wantErr(t, "POST", ex(s.Eligible, "priority"), testToken, map[string]any{}, 400, "priority")
		wantErr(t, "POST", ex(s.Delayed, "priority"), testToken, map[string]any{"priority": 1}, 409, "execution_not_eligible")
	})

	t.Run("signal resumes a suspended execution", func(t *testing.T) {
		var r admin.ActionResult
		if c := call(t, "POST", ex(s.Suspended, "signal"), testToken, map[string]any{"name": "approve"}, &r); c != 200 {
			t.Fatalf("status %d %+v", c, r)
		}
		if r.Detail["effect"] != "resume_condition_satisfied" {
			t.Fatalf("signal %+v", r)
		}
		wantErr(t, "POST", ex(s.Eligible, "signal"), testToken, map[string]any{"name": "approve"}, 409, "no current waitpoint")
		wantErr(t, "POST", ex(s.Eligible, "signal"), testToken, map[string]any{}, 400, "needs a name")
	})

	t.Run("cancel then replay", func(t *testing.T) {
		var r admin.ActionResult
		if c := call(t, "POST", ex(s.Eligible, "cancel"), testToken, map[string]any{"reason": "test"}, &r); c != 200 {
			t.Fatalf("status %d %+v", c, r)
		}
		if st := state(s.Eligible); st != "cancelled" {
			t.Fatalf("after cancel: %s", st)
		}
		wantErr(t, "POST", ex(s.Eligible, "cancel"), testToken, nil, 409, "execution_not_active")
		if c := call(t, "POST", ex(s.Failed, "replay"), testToken, nil, &r); c != 200 {
			t.Fatalf("replay status %d %+v", c, r)
		}
		if st := state(s.Failed); st != "waiting" {
			t.Fatalf("after replay: %s", st)
		}
		// The answer says what the replay did, as the Postgres console's
		// does (JSON numbers decode as float64).
		if r.Detail["public_state"] != "waiting" || r.Detail["replay_count"] != float64(1) || r.Detail["unsatisfied_edges"] != float64(0) {
			t.Fatalf("replay answer %+v", r.Detail)
		}
	})

	t.Run("bad ids, unknown actions and lanes", func(t *testing.T) {
		wantErr(t, "POST", base+"/api/executions/nope/cancel", testToken, nil, 400, "execution id")
		wantErr(t, "POST", ex(model.ExecutionID("{fp:1}:"+model.NewUUID().String()), "cancel"), testToken, nil, 404, "execution")
		wantErr(t, "POST", ex(s.Delayed, "explode"), testToken, nil, 404, "unknown action")
		wantErr(t, "POST", base+"/api/lanes/nope/pause", testToken, nil, 404, `unknown lane "nope"`)
		wantErr(t, "POST", base+"/api/lanes/"+consoletest.LaneA+"/pause", testToken, nil, 501, "no lane state")
		wantErr(t, "POST", base+"/api/lanes/"+consoletest.LaneA+"/pause", "", nil, 403, "admin token required")
	})
}

func TestConsoleUIServed(t *testing.T) {
	base := startServer(t, admin.ServerConfig{Backend: valkeytest.Client(t)})
	for path, want := range map[string]string{"/ui/": `<script src="app.js">`, "/ui/app.js": "/api/executions", "/ui/style.css": "svg#dag"} {
		code, body := get(t, base+path)
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("GET %s: %d, body lacks %q", path, code, want)
		}
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestConsoleThroughputHistory(t *testing.T) {
	vc := valkeytest.Client(t)
	s := admin.NewSampler(admin.SamplerConfig{Backend: vc, Interval: 20 * time.Millisecond, Logger: valkeytest.Logger()})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	base := startServer(t, admin.ServerConfig{Backend: vc, Sampler: s})
	var h struct{ Points []admin.ThroughputPoint }
	valkeytest.Eventually(t, 10*time.Second, "three throughput readings", func() bool {
		h.Points = nil
		return call(t, "GET", base+"/api/throughput", "", nil, &h) == 200 && len(h.Points) >= 3
	})
	for i := 1; i < len(h.Points); i++ {
		if !h.Points[i].At.After(h.Points[i-1].At) {
			t.Fatalf("readings out of order: %+v", h.Points)
		}
	}
	noSampler := startServer(t, admin.ServerConfig{Backend: vc})
	wantErr(t, "GET", noSampler+"/api/throughput", "", nil, 404, "no API route")
}

// TestConsoleAPICluster runs the console on a Valkey Cluster: listings
// and counts read every primary, an execution's keys share its slot,
// and an action goes to the right node.
func TestConsoleAPICluster(t *testing.T) {
	vc := valkeytest.ClusterClient(t)
	s := consoletest.Seed(t, vc)
	base := startServer(t, admin.ServerConfig{Backend: vc, AdminToken: testToken})
	var p admin.ExecutionPage
	if c := call(t, "GET", base+"/api/executions?lane="+consoletest.LaneA, "", nil, &p); c != 200 || len(p.Executions) != 6 {
		t.Fatalf("cluster list: %d %+v", c, p)
	}
	var d admin.ExecutionDetail
	call(t, "GET", base+"/api/executions/"+string(s.Failed), "", nil, &d)
	if len(d.Attempts) != 1 || !strings.Contains(d.Attempts[0].Error, "decoder exploded") || len(d.LeaseHistory) != 2 {
		t.Fatalf("cluster detail: %+v", d)
	}
	var f admin.FlowView
	call(t, "GET", base+"/api/flows/"+s.Flow.String(), "", nil, &f)
	if len(f.Nodes) != 3 || len(f.Edges) != 2 {
		t.Fatalf("cluster flow: %+v", f)
	}
	var l struct{ Lanes []admin.LaneCounts }
	call(t, "GET", base+"/api/lanes", "", nil, &l)
	found := false
	for _, x := range l.Lanes {
		if x.Lane == consoletest.LaneA {
			found = x.Total == 6
		}
	}
	if !found {
		t.Fatalf("cluster lanes: %+v", l)
	}
	var w struct{ Workers []admin.WorkerInfo }
	call(t, "GET", base+"/api/workers", "", nil, &w)
	held := int64(-1)
	for _, x := range w.Workers {
		if x.InstanceID == s.Worker {
			held = x.Leases
		}
	}
	if held != 1 {
		t.Fatalf("cluster workers: %+v", w)
	}
	var r admin.ActionResult
	if c := call(t, "POST", base+"/api/executions/"+string(s.Suspended)+"/signal", testToken, map[string]any{"name": "approve"}, &r); c != 200 ||
		r.Detail["effect"] != "resume_condition_satisfied" {
		t.Fatalf("cluster signal: %d %+v", c, r)
	}
	if c := call(t, "POST", base+"/api/executions/"+string(s.Eligible)+"/cancel", testToken, nil, &r); c != 200 {
		t.Fatalf("cluster cancel: %d %+v", c, r)
	}
}
