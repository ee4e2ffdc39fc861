// Command getting-started is the smallest complete fabric program: it
// registers a typed handler on a Mux with logging and panic recovery,
// enqueues three jobs with options, runs a worker until they are done and
// prints their results.
//
//	go run ./examples/getting-started            # a private server for the run
//	FABRIC_URL=redis://127.0.0.1:6379 go run ./examples/getting-started
//	FABRIC_URL=postgres://localhost/app go run ./examples/getting-started  # after `fabric migrate`
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	_ "github.com/fabric-host/fabric/backend/postgres" // postgres:// URLs
	"github.com/fabric-host/fabric/backend/valkey"     // redis:// URLs, and the private server
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// WelcomeEmail is the typed argument of the "email.welcome" kind, sent as
// JSON.
type WelcomeEmail struct {
	To   string `json:"to"`
	Name string `json:"name"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
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

	// Producer: typed arguments, options validated before anything is sent.
	var ids []model.ExecutionID
	for _, to := range []WelcomeEmail{{"ann@example.com", "Ann"}, {"bob@example.com", "Bob"}, {"cy@example.com", "Cy"}} {
		id, err := sdk.EnqueueJSON(ctx, client, "email.welcome", to,
			sdk.WithLane("emails"),
			sdk.WithIdempotencyKey("welcome:"+to.To), // enqueueing twice sends once
			sdk.WithRetry(3, sdk.ExponentialBackoff(time.Second, time.Minute, 2)),
			sdk.WithAttemptTimeout(30*time.Second),
			sdk.WithTag("app.campaign", "onboarding"))
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}

	// Consumer: one handler per kind, middlewares around all of them.
	mux := sdk.NewMux()
	mux.Use(sdk.Recover(logger), sdk.Logging(logger))
	sdk.HandleJSON(mux, "email.welcome", func(ctx context.Context, job *sdk.Job, m WelcomeEmail) error {
		job.SetResult([]byte("welcomed " + m.Name + " <" + m.To + ">"))
		return nil
	})
	w, err := client.NewWorker(ctx, sdk.WorkerConfig{WorkerID: "mailer", Lanes: []string{"emails"}, Concurrency: 4, Logger: logger})
	if err != nil {
		return err
	}
	defer w.Close(context.Background())
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx, mux.ServeJob) }()

	for _, id := range ids {
		if err := waitTerminal(ctx, client, id); err != nil {
			stop()
			return err
		}
		res, err := client.Result(ctx, id)
		if err != nil {
			stop()
			return err
		}
		fmt.Fprintln(out, string(res))
	}
	stop()
	return <-ran
}

// waitTerminal polls an execution until it ends.
func waitTerminal(ctx context.Context, c *sdk.Client, id model.ExecutionID) error {
	for {
		st, err := c.State(ctx, id)
		if err != nil {
			return err
		}
		if st.Terminal() {
			if st.PublicState != model.PublicCompleted {
				return fmt.Errorf("%s ended %s: %s", id, st.PublicState, st.FailureReason)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s still %s: %w", id, st.PublicState, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
