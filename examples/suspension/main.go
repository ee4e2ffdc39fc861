// Command suspension shows a job that waits for a person: the handler
// suspends the execution on a waitpoint ("approve" or "reject"), hands the
// waitpoint's id and token to the outside world (here a channel standing
// in for an email with a link), and an external party delivers the signal
// with the token; the execution resumes on any worker, reads the decision
// from the signal (Job.ResumeSignals) and completes.
//
//	go run ./examples/suspension                           # a private server for the run
//	FABRIC_URL=redis://127.0.0.1:6379 go run ./examples/suspension
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	url := os.Getenv("FABRIC_URL")
	if url == "" { // a private valkey-server (or redis-server) for the run
		srv, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: logger})
		if err != nil {
			log.Fatalf("start a private server (or set FABRIC_URL): %v", err)
		}
		defer srv.Stop()
		url = srv.URL()
	}
	client, err := sdk.Open(ctx, url, sdk.ClientConfig{Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := run(ctx, client, logger, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, client *sdk.Client, logger *slog.Logger, out io.Writer) error {
	// Waitpoint tokens are HMACs under a per-partition secret: sdk.Open
	// installed a random one if the deployment had none (as `fabric run`
	// does; a stored secret is kept).
	id, err := client.Enqueue(ctx, "expense.review", []byte(`{"amount":1200}`), sdk.WithLane("approvals"))
	if err != nil {
		return err
	}

	// The "inbox" of the approver: where the waitpoint token is sent.
	inbox := make(chan *sdk.Suspension, 1)
	mux := sdk.NewMux()
	mux.Handle("expense.review", func(ctx context.Context, job *sdk.Job) error {
		if job.AttemptType == "resumed" {
			// The signal that resumed the job says what the approver
			// decided, and its payload who it was.
			sigs, err := job.ResumeSignals(ctx)
			if err != nil || len(sigs) == 0 {
				return fmt.Errorf("read the decision: %d signals, %v", len(sigs), err)
			}
			var who struct {
				By string `json:"by"`
			}
			_ = json.Unmarshal(sigs[0].Payload, &who)
			decision := map[string]string{"approve": "approved", "reject": "rejected"}[sigs[0].Name]
			job.SetResult(fmt.Appendf(nil, "expense %s by %s", decision, who.By))
			return nil
		}
		s, err := job.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve", "reject"}, Timeout: 24 * time.Hour})
		if err != nil {
			return err
		}
		inbox <- s
		return nil // ignored after a suspend: the execution waits
	})
	w, err := client.NewWorker(ctx, sdk.WorkerConfig{WorkerID: "reviewer", Lanes: []string{"approvals"}, Logger: logger})
	if err != nil {
		return err
	}
	defer w.Close(context.Background())
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(runCtx, mux.ServeJob) }()

	var s *sdk.Suspension
	select {
	case s = <-inbox:
	case <-ctx.Done():
		return ctx.Err()
	}
	st, err := client.State(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "waiting: %s\n", st.PublicState)

	// The approver clicks the link: an external process delivers the
	// signal, authenticated by the waitpoint token.
	res, err := client.DeliverSignal(ctx, s.ExecutionID, sdk.Signal{WaitpointID: s.WaitpointID, Token: s.Token,
		Name: "approve", Payload: []byte(`{"by":"dana"}`), IdempotencyKey: "approve-once"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "signal resumed it: %v\n", res.Resumed)

	for {
		st, err := client.State(ctx, id)
		if err != nil {
			return err
		}
		if st.PublicState == model.PublicCompleted {
			r, err := client.Result(ctx, id)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s\n", r)
			return nil
		}
		if st.Terminal() {
			return fmt.Errorf("ended %s", st.PublicState)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
