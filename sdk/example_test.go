package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// The examples need a running server, so they are compiled but not run.

func dial(ctx context.Context) *valkey.Client {
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: "redis://127.0.0.1:6379"})
	if err != nil {
		log.Fatal(err)
	}
	return vc
}

// A producer creates executions; a worker runs them.
func Example() {
	ctx := context.Background()
	vc := dial(ctx)
	defer vc.Close()

	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc})
	if err != nil {
		log.Fatal(err)
	}
	id, err := client.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "emails", Kind: "send_email",
		Payload: []byte(`{"to":"ann@example.com"}`)})
	if err != nil {
		log.Fatal(err)
	}

	w, err := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "mailer", Lanes: []string{"emails"}, Concurrency: 8})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close(context.Background())
	runCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	_ = w.Run(runCtx, func(ctx context.Context, job *sdk.Job) error {
		fmt.Printf("sending %s\n", job.Payload)
		return nil
	})
	st, _ := client.State(ctx, id)
	fmt.Println(st.PublicState)
}

// Retries, timeouts and routing are part of the execution's policy.
func ExampleClient_CreateExecution() {
	ctx := context.Background()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: dial(ctx)})
	id, err := client.CreateExecution(ctx, sdk.ExecutionSpec{
		Lane:           "render",
		Kind:           "render_frame",
		Priority:       100,
		Delay:          5 * time.Second,
		IdempotencyKey: "frame-42",
		Tags:           map[string]string{"app.project": "demo"},
		Policy: &sdk.Policy{
			MaxRetries:           3,
			Backoff:              sdk.ExponentialBackoff(time.Second, time.Minute, 2),
			AttemptTimeout:       10 * time.Minute,
			RequiredCapabilities: []string{"gpu"},
		},
	})
	if errors.Is(err, sdk.ErrInvalidInput) {
		log.Fatalf("bad spec: %v", err) // nothing was sent
	}
	fmt.Println(id)
}

// Handlers choose the outcome by their return value.
func ExampleWorker_Run() {
	ctx := context.Background()
	w, _ := sdk.Connect(ctx, dial(ctx), sdk.WorkerConfig{WorkerID: "renderer", Lanes: []string{"render"},
		Capabilities: []string{"gpu"}, Concurrency: 4})
	defer w.Close(context.Background())
	_ = w.Run(ctx, func(ctx context.Context, job *sdk.Job) error {
		switch {
		case len(job.Payload) == 0:
			return sdk.Permanent(errors.New("empty payload")) // fail, no retry
		case job.Attempt == 0 && job.Kind == "warmup":
			return sdk.DelayFor(time.Second) // park; the same attempt resumes later
		}
		if _, err := job.AppendFrame(ctx, sdk.Frame{Type: "progress", Payload: []byte("50%")}); err != nil {
			return err // fail; retried per policy
		}
		job.SetResult([]byte("done"))
		return nil // complete
	})
}

// ClaimNext gives manual control over one lease.
func ExampleWorker_ClaimNext() {
	ctx := context.Background()
	w, _ := sdk.Connect(ctx, dial(ctx), sdk.WorkerConfig{WorkerID: "manual", Lanes: []string{"jobs"}})
	defer w.Close(context.Background())
	lease, err := w.ClaimNext(ctx)
	if err != nil || lease == nil {
		return // nothing in this window; call again
	}
	if err := doWork(lease.Context(), lease.Payload); err != nil {
		res, _ := lease.Fail(ctx, err.Error(), sdk.CategoryTransient, true)
		fmt.Println("retry scheduled:", res.RetryScheduled)
		return
	}
	_ = lease.Complete(ctx, nil)
}

func doWork(context.Context, []byte) error { return nil }

// A suspended job waits for a signal; the signal's sender needs the
// waitpoint id and token.
func ExampleJob_Suspend() {
	ctx := context.Background()
	vc := dial(ctx)
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc})
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "approvals", Lanes: []string{"approvals"}})
	defer w.Close(context.Background())
	tokens := make(chan *sdk.Suspension, 1)
	go w.Run(ctx, func(ctx context.Context, job *sdk.Job) error {
		if job.AttemptType == "resumed" {
			return nil // approved
		}
		s, err := job.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: 24 * time.Hour})
		if err != nil {
			return err
		}
		tokens <- s
		return nil
	})
	s := <-tokens
	res, err := client.DeliverSignal(ctx, s.ExecutionID, sdk.Signal{WaitpointID: s.WaitpointID, Token: s.Token, Name: "approve"})
	if err == nil {
		fmt.Println("resumed:", res.Resumed)
	}
}

// Flow members run after their parents complete.
func ExampleFlow_Add() {
	ctx := context.Background()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: dial(ctx)})
	flow, _ := client.CreateFlow(ctx, "etl")
	extract, _ := flow.Add(ctx, sdk.ExecutionSpec{Lane: "etl", Kind: "extract"})
	transform, _ := flow.Add(ctx, sdk.ExecutionSpec{Lane: "etl", Kind: "transform"}, extract)
	load, _ := flow.Add(ctx, sdk.ExecutionSpec{Lane: "etl", Kind: "load"}, transform)
	fmt.Println([]model.ExecutionID{extract, transform, load})
}
