package sdk_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// The examples in this file run: each gets a fresh database of a private
// server started for them (stopped by TestMain).

var exampleSrv struct {
	sync.Mutex
	srv *valkey.Server
	db  int
}

// exampleBackend returns a client on a fresh database of the examples'
// server, with the library and a waitpoint secret installed.
func exampleBackend() *valkey.Client {
	exampleSrv.Lock()
	defer exampleSrv.Unlock()
	ctx := context.Background()
	if exampleSrv.srv == nil {
		s, err := valkey.StartServer(ctx, valkey.ServerConfig{Databases: 64, Logger: quiet})
		if err != nil {
			log.Fatal(err)
		}
		exampleSrv.srv = s
	}
	exampleSrv.db++
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: exampleSrv.srv.URL(), DB: exampleSrv.db, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := vc.EnsureLibrary(ctx); err != nil {
		log.Fatal(err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	if err := vc.InstallWaitpointHMACSecret(ctx, hex.EncodeToString(secret)); err != nil {
		log.Fatal(err)
	}
	return vc
}

func stopExampleServer() {
	exampleSrv.Lock()
	defer exampleSrv.Unlock()
	if exampleSrv.srv != nil {
		exampleSrv.srv.Stop()
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// runUntil runs w with h until done is closed (or a minute passes).
func runUntil(w *sdk.Worker, h sdk.Handler, done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
		cancel()
	}()
	_ = w.Run(ctx, h)
}

type invoice struct {
	Customer string `json:"customer"`
	Cents    int    `json:"cents"`
}

// A Mux routes jobs by kind through middlewares; HandleJSON decodes typed
// arguments that EnqueueJSON encoded.
func ExampleMux() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})

	_, err := sdk.EnqueueJSON(ctx, client, "invoice.send", invoice{Customer: "acme", Cents: 4200},
		sdk.WithLane("billing"), sdk.WithIdempotencyKey("invoice-2026-11-acme"))
	if err != nil {
		log.Fatal(err)
	}

	done := make(chan struct{})
	mux := sdk.NewMux()
	mux.Use(sdk.Recover(quiet), sdk.Observe(func(_ context.Context, job *sdk.Job, err error, _ time.Duration) {
		fmt.Println(job.Kind, "->", sdk.Outcome(err))
		close(done)
	}))
	sdk.HandleJSON(mux, "invoice.send", func(_ context.Context, _ *sdk.Job, inv invoice) error {
		fmt.Printf("invoice for %s: %d.%02d\n", inv.Customer, inv.Cents/100, inv.Cents%100)
		return nil
	})
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "billing", Lanes: []string{"billing"}, Logger: quiet})
	defer w.Close(ctx)
	runUntil(w, mux.ServeJob, done)
	// Output:
	// invoice for acme: 42.00
	// invoice.send -> complete
}

// Invalid options fail with ErrInvalidInput before anything is sent.
func ExampleClient_Enqueue() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})

	_, err := client.Enqueue(ctx, "render", nil, sdk.WithPriority(100_000))
	fmt.Println(err)
	id, err := client.Enqueue(ctx, "render", []byte("frame-1"),
		sdk.WithLane("gpu"), sdk.WithPriority(10), sdk.WithDelay(time.Hour),
		sdk.WithCapabilities("cuda"), sdk.WithAttemptTimeout(10*time.Minute), sdk.WithTag("app.project", "demo"))
	if err != nil {
		log.Fatal(err)
	}
	st, _ := client.State(ctx, id)
	fmt.Println(st.Lane, st.PublicState, st.Fields["required_capabilities"])
	// Output:
	// sdk: invalid input: priority: 100000 is out of range 0..9000
	// gpu delayed cuda
}

// An AnyOf join runs the child on the first parent that succeeds.
func ExampleFlow_AddJoin() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	flow, _ := client.CreateFlow(ctx, "mirrors")
	a, _ := flow.Add(ctx, sdk.ExecutionSpec{Lane: "fetch", Kind: "mirror-a"})
	b, _ := flow.Add(ctx, sdk.ExecutionSpec{Lane: "fetch", Kind: "mirror-b"})
	unpack, err := flow.AddJoin(ctx, sdk.ExecutionSpec{Lane: "unpack", Kind: "unpack"}, sdk.AnyOf(sdk.LetRun), a, b)
	if err != nil {
		log.Fatal(err)
	}
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "f", Lanes: []string{"fetch"}, ResolveDependencies: true, Logger: quiet})
	defer w.Close(ctx)
	var lease *sdk.Lease
	for lease == nil {
		lease, _ = w.ClaimNext(ctx)
	}
	st, _ := client.State(ctx, unpack)
	fmt.Println("before:", st.EligibilityState)
	_ = lease.Complete(ctx, nil) // one mirror succeeded
	st, _ = client.State(ctx, unpack)
	fmt.Println("after one success:", st.EligibilityState)
	// Output:
	// before: blocked_by_dependencies
	// after one success: eligible_now
}

// A suspended job resumes when an external party delivers a signal with
// the waitpoint's token.
func ExampleJob_Suspend_signal() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	id, _ := client.Enqueue(ctx, "approve", nil, sdk.WithLane("approvals"))

	tokens := make(chan *sdk.Suspension, 1)
	delivered, done := make(chan struct{}), make(chan struct{})
	mux := sdk.NewMux()
	mux.Handle("approve", func(ctx context.Context, job *sdk.Job) error {
		if job.AttemptType == "resumed" {
			<-delivered
			fmt.Println("resumed")
			defer close(done)
			return nil
		}
		s, err := job.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approved"}, Timeout: time.Hour})
		if err != nil {
			return err
		}
		tokens <- s
		return nil
	})
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "a", Lanes: []string{"approvals"}, Logger: quiet})
	defer w.Close(ctx)
	go func() {
		s := <-tokens
		st, _ := client.State(ctx, id)
		fmt.Println(st.PublicState)
		res, _ := client.DeliverSignal(ctx, s.ExecutionID, sdk.Signal{WaitpointID: s.WaitpointID, Token: s.Token, Name: "approved"})
		fmt.Println("signal resumes:", res.Resumed)
		close(delivered)
	}()
	runUntil(w, mux.ServeJob, done)
	// Output:
	// suspended
	// signal resumes: true
	// resumed
}

// A periodic schedule is stored in the deployment; the periodic plugin of
// the running hosts fires it (see examples/periodic for a full run).
func ExampleClient_AddPeriodic() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	_, err := client.AddPeriodic(ctx, sdk.Periodic{Name: "nightly-report", Cron: "30 2 * * *", Kind: "report"},
		sdk.WithLane("reports"), sdk.WithRetry(2, sdk.FixedBackoff(time.Minute)))
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.AddPeriodic(ctx, sdk.Periodic{Name: "heartbeat", Every: 30 * time.Second, Kind: "ping"})
	if err != nil {
		log.Fatal(err)
	}
	list, _ := client.ListPeriodic(ctx)
	for _, p := range list {
		fmt.Printf("%s cron=%q every=%s lane=%s next tick set: %v\n", p.Name, p.Cron, p.Every, p.Lane, !p.NextDue.IsZero())
	}
	// Output:
	// heartbeat cron="" every=30s lane=default next tick set: true
	// nightly-report cron="30 2 * * *" every=0s lane=reports next tick set: true
}

// Progress is stored on the execution for operators and clients.
func ExampleJob_ReportProgress() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	id, _ := client.Enqueue(ctx, "import", nil, sdk.WithLane("imports"))
	done := make(chan struct{})
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "i", Lanes: []string{"imports"}, Logger: quiet})
	defer w.Close(ctx)
	runUntil(w, func(ctx context.Context, job *sdk.Job) error {
		defer close(done)
		if err := job.ReportProgress(ctx, 50, "row 500 of 1000"); err != nil {
			return err
		}
		st, _ := client.State(ctx, job.ID)
		fmt.Println(st.Fields["progress_pct"], st.Fields["progress_message"])
		return nil
	}, done)
	st, _ := client.State(ctx, id)
	fmt.Println(st.PublicState)
	// Output:
	// 50 row 500 of 1000
	// completed
}

// A flow member fans out children at run time and runs again once they
// all succeeded.
func ExampleJob_WaitForChildren() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	flow, _ := client.CreateFlow(ctx, "report")
	_, _ = flow.Add(ctx, sdk.ExecutionSpec{Lane: "reports", Kind: "report"})

	done := make(chan struct{})
	var mu sync.Mutex
	shards := 0
	mux := sdk.NewMux()
	mux.Handle("report", func(ctx context.Context, job *sdk.Job) error {
		if job.AttemptType == "resumed" {
			mu.Lock()
			fmt.Println("merging", shards, "shards")
			mu.Unlock()
			close(done)
			return nil
		}
		var kids []model.ExecutionID
		for range 3 {
			id, err := client.Flow(job.FlowID()).Add(ctx, sdk.ExecutionSpec{Lane: "reports", Kind: "shard"})
			if err != nil {
				return err
			}
			kids = append(kids, id)
		}
		return job.WaitForChildren(ctx, kids...)
	})
	mux.Handle("shard", func(context.Context, *sdk.Job) error {
		mu.Lock()
		shards++
		mu.Unlock()
		return nil
	})
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "r", Lanes: []string{"reports"}, Concurrency: 3,
		ResolveDependencies: true, Logger: quiet})
	defer w.Close(ctx)
	runUntil(w, mux.ServeJob, done)
	// Output:
	// merging 3 shards
}

// A reader follows an attempt's output live until the attempt ends.
func ExampleClient_TailAttemptStream() {
	ctx := context.Background()
	vc := exampleBackend()
	defer vc.Close()
	client, _ := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: quiet})
	id, _ := client.Enqueue(ctx, "generate", nil, sdk.WithLane("llm"))
	w, _ := sdk.Connect(ctx, vc, sdk.WorkerConfig{WorkerID: "g", Lanes: []string{"llm"}, Logger: quiet})
	defer w.Close(ctx)
	stop := make(chan struct{})
	defer close(stop)
	go runUntil(w, func(ctx context.Context, job *sdk.Job) error {
		for _, tok := range []string{"Hello", ", ", "world"} {
			if _, err := job.AppendFrame(ctx, sdk.Frame{Type: "token", Payload: []byte(tok)}); err != nil {
				return err
			}
		}
		return nil
	}, stop)

	text, after := "", ""
	for {
		frames, closed, err := client.TailAttemptStream(ctx, id, 0, after, time.Second, 100)
		if err != nil {
			log.Fatal(err)
		}
		for _, f := range frames {
			text += f.Fields["payload"]
			after = f.ID
		}
		if closed && len(frames) == 0 {
			break
		}
	}
	fmt.Println(text)
	// Output:
	// Hello, world
}
