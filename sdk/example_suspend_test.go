package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// The examples in this file run on a fresh database of the examples'
// server (see example_run_test.go).

// claimFirst connects a worker on lane and claims the first execution.
func claimFirst(ctx context.Context, w *sdk.Worker) *sdk.Lease {
	for {
		l, err := w.ClaimNext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if l != nil {
			return l
		}
	}
}

// A release needs every approver: with AllWaitpoints the job resumes
// only once each waitpoint received "approve", and the resumed attempt
// reads who approved with ResumeSignals.
func ExampleSuspendSpec_allWaitpoints() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	id, _ := client.Enqueue(ctx, "release", nil, sdk.WithLane("releases"))
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "r", Lanes: []string{"releases"}, Logger: quiet})
	defer w.Close(ctx)

	l := claimFirst(ctx, w)
	s, err := l.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve"}, AllWaitpoints: true, Timeout: 24 * time.Hour,
		WaitpointKey: "approver:qa", ExtraWaitpoints: []string{"approver:security"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, wp := range s.Waitpoints { // hand each approver its own token
		res, _ := client.DeliverSignal(ctx, id, sdk.Signal{WaitpointID: wp.ID, Token: wp.Token, Name: "approve",
			Payload: []byte(`"` + wp.Key + `"`)})
		fmt.Println(wp.Key, "approves; resumed:", res.Resumed)
	}

	r := claimFirst(ctx, w) // the same execution, attempt type "resumed"
	sigs, _ := r.ResumeSignals(ctx)
	fmt.Println(r.AttemptType, "with", len(sigs), "approvals")
	_ = r.Complete(ctx, nil)
	// Output:
	// approver:qa approves; resumed: false
	// approver:security approves; resumed: true
	// resumed with 2 approvals
}

// A job hands out a callback's token before it suspends; when the
// callback came first, TrySuspend keeps the lease and returns the
// buffered signal so the job goes on at once.
func ExampleJob_TrySuspend() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	_, _ = client.Enqueue(ctx, "charge", nil, sdk.WithLane("payments"))

	done := make(chan struct{})
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "p", Lanes: []string{"payments"}, Logger: quiet})
	defer w.Close(ctx)
	runUntil(w, func(ctx context.Context, job *sdk.Job) error {
		defer close(done)
		wp, err := job.CreatePendingWaitpoint(ctx, "", time.Hour)
		if err != nil {
			return err
		}
		// The payment provider answers fast (here: before the suspend).
		_, _ = client.DeliverSignal(ctx, job.ID, sdk.Signal{WaitpointID: wp.ID, Token: wp.Token,
			Name: "paid", Payload: []byte(`{"ref":"ch_42"}`)})
		out, err := job.TrySuspend(ctx, sdk.SuspendSpec{Signals: []string{"paid"}, Pending: wp})
		if err != nil {
			return err
		}
		fmt.Println("suspended:", out.Suspended)
		for _, s := range out.Signals {
			fmt.Println(s.Name, string(s.Payload))
		}
		return nil // completes: the lease was kept
	}, done)
	// Output:
	// suspended: false
	// paid {"ref":"ch_42"}
}

// A job reports token usage to a budget; a report that would pass the
// hard limit is refused and adds nothing.
func ExampleJob_ReportUsage() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	budget, err := client.CreateBudget(ctx, sdk.Budget{ScopeType: "tenant", ScopeID: "acme",
		Limits: map[string]sdk.BudgetLimit{"tokens": {Hard: 1000, Soft: 800}}})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = client.Enqueue(ctx, "summarize", nil, sdk.WithLane("llm"))

	done := make(chan struct{})
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "l", Lanes: []string{"llm"}, Logger: quiet})
	defer w.Close(ctx)
	runUntil(w, func(ctx context.Context, job *sdk.Job) error {
		defer close(done)
		for i, n := range []int64{500, 400, 300} {
			r, err := job.ReportUsage(ctx, budget, map[string]int64{"tokens": n}, fmt.Sprint("chunk-", i))
			if err != nil {
				return err
			}
			fmt.Printf("+%d: soft breach %v, exceeded %v\n", n, r.SoftBreach, r.Exceeded)
			if r.Exceeded {
				return sdk.Permanent(fmt.Errorf("budget exhausted"))
			}
		}
		return nil
	}, done)
	u, _ := client.BudgetUsage(ctx, budget)
	fmt.Println("used:", u.Used["tokens"], "of", u.Limits["tokens"].Hard)
	// Output:
	// +500: soft breach false, exceeded false
	// +400: soft breach true, exceeded false
	// +300: soft breach false, exceeded true
	// used: 900 of 1000
}

// Jobs calling a rate-limited API take a slot of a quota first, and
// wait for the window when it is full.
func ExampleJob_Admit() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	api, err := client.CreateQuota(ctx, sdk.Quota{Window: time.Minute, MaxPerWindow: 2})
	if err != nil {
		log.Fatal(err)
	}
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "a", Lanes: []string{"api"}, Logger: quiet})
	defer w.Close(ctx)
	for i := range 3 {
		_, _ = client.Enqueue(ctx, "call", nil, sdk.WithLane("api"))
		l := claimFirst(ctx, w)
		a, err := l.Admit(ctx, api)
		if err != nil {
			log.Fatal(err)
		}
		if a.Admitted {
			fmt.Println("call", i, "admitted")
			_ = a.Release(ctx)
			_ = l.Complete(ctx, nil)
			continue
		}
		fmt.Println("call", i, "waits for the", a.Reason, "window:", a.RetryAfter > 0)
		_ = l.Delay(ctx, time.Now().Add(a.RetryAfter)) // in a handler: return sdk.DelayFor(a.RetryAfter)
	}
	u, _ := client.QuotaUsage(ctx, api)
	fmt.Println(u.InWindow, "of", u.MaxPerWindow, "used this window")
	// Output:
	// call 0 admitted
	// call 1 admitted
	// call 2 waits for the rate window: true
	// 2 of 2 used this window
}

// A dispatcher that routes work itself claims a given execution.
func ExampleWorker_ClaimExecution() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	_, _ = client.Enqueue(ctx, "thumbnail", nil, sdk.WithLane("media"))
	big, _ := client.Enqueue(ctx, "transcode", nil, sdk.WithLane("media"))
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "m", Lanes: []string{"media"}, Logger: quiet})
	defer w.Close(ctx)

	l, err := w.ClaimExecution(ctx, big)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed", l.Kind)
	_, err = w.ClaimExecution(ctx, big) // already leased
	fmt.Println(err != nil)
	_ = l.Complete(ctx, nil)
	_, err = w.ClaimExecution(ctx, model.ExecutionID("not-an-id"))
	fmt.Println(err)
	// Output:
	// claimed transcode
	// true
	// sdk: invalid input: id: model: execution id must start with {fp:N}:: "not-an-id"
}

// Summary frames are JSON merge patches folded into one document per
// attempt; readers get the latest state without replaying the stream.
func ExampleJob_AppendFrame_summary() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	id, _ := client.Enqueue(ctx, "crawl", nil, sdk.WithLane("crawl"))
	done := make(chan struct{})
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "c", Lanes: []string{"crawl"}, Logger: quiet})
	defer w.Close(ctx)
	runUntil(w, func(ctx context.Context, job *sdk.Job) error {
		defer close(done)
		for _, patch := range []string{`{"pages":1,"last":"/"}`, `{"pages":2,"last":"/about"}`} {
			if _, err := job.AppendFrame(ctx, sdk.Frame{Type: "state", Mode: sdk.FrameSummary, Payload: []byte(patch)}); err != nil {
				return err
			}
		}
		_, err := job.AppendFrame(ctx, sdk.Frame{Type: "log", Mode: sdk.FrameBestEffort, Payload: []byte("fetched /about")})
		return err
	}, done)
	doc, version, err := client.ReadSummary(ctx, id, 0)
	if err != nil {
		log.Fatal(err)
	}
	var state struct {
		Pages int    `json:"pages"`
		Last  string `json:"last"`
	}
	_ = json.Unmarshal([]byte(doc), &state)
	fmt.Println(state.Pages, "pages, last", state.Last, "after", version, "patches")
	// Output:
	// 2 pages, last /about after 2 patches
}

// A producer with a batch at hand sends it in one round trip; specs are
// built (and validated) with BuildSpec, so one bad spec sends nothing.
func ExampleClient_EnqueueMany() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	var specs []sdk.ExecutionSpec
	for _, user := range []string{"ann", "bob", "cy"} {
		spec, err := sdk.BuildSpec("welcome", []byte(user), sdk.WithLane("emails"), sdk.WithIdempotencyKey("welcome:"+user))
		if err != nil {
			log.Fatal(err)
		}
		specs = append(specs, spec)
	}
	ids, err := client.EnqueueMany(ctx, specs...)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ids), "enqueued")
	_, err = client.EnqueueMany(ctx, specs[0], sdk.ExecutionSpec{Kind: "welcome"})
	fmt.Println(err)
	// Output:
	// 3 enqueued
	// spec 1: sdk: invalid input: lane: must not be empty
}

// Two of three reviewers suffice: WaitpointQuorum counts distinct
// waitpoints that received a matching signal.
func ExampleSuspendSpec_waitpointQuorum() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	id, _ := client.Enqueue(ctx, "merge", nil, sdk.WithLane("reviews"))
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "rv", Lanes: []string{"reviews"}, Logger: quiet})
	defer w.Close(ctx)

	l := claimFirst(ctx, w)
	s, err := l.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"lgtm"}, WaitpointQuorum: 2, Timeout: time.Hour,
		WaitpointKey: "reviewer:a", ExtraWaitpoints: []string{"reviewer:b", "reviewer:c"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, wp := range []sdk.Waitpoint{s.Waitpoints[0], s.Waitpoints[0], s.Waitpoints[2]} {
		res, _ := client.DeliverSignal(ctx, id, sdk.Signal{WaitpointID: wp.ID, Token: wp.Token, Name: "lgtm"})
		fmt.Println(wp.Key, "lgtm; resumed:", res.Resumed)
	}
	_ = claimFirst(ctx, w).Complete(ctx, nil)
	// Output:
	// reviewer:a lgtm; resumed: false
	// reviewer:a lgtm; resumed: false
	// reviewer:c lgtm; resumed: true
}
