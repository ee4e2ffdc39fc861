// Command flow runs a small DAG: a dataset is fetched from two mirrors,
// unpacked as soon as either succeeds (AnyOf, the slower mirror is let
// run), then three shards are indexed in parallel and a report is built
// once two of them succeeded (Quorum 2 of 3).
//
//	go run ./examples/flow                                 # a private server for the run
//	FABRIC_URL=redis://127.0.0.1:6379 go run ./examples/flow
package main

import (
	"context"
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
	flow, err := client.CreateFlow(ctx, "dataset-refresh")
	if err != nil {
		return err
	}
	step := func(kind string, join sdk.Join, after ...model.ExecutionID) (model.ExecutionID, error) {
		return flow.AddJoin(ctx, sdk.ExecutionSpec{Lane: "etl", Kind: kind}, join, after...)
	}
	mirrorA, err := step("fetch", sdk.AllOf())
	if err != nil {
		return err
	}
	mirrorB, err := step("fetch", sdk.AllOf())
	if err != nil {
		return err
	}
	unpack, err := step("unpack", sdk.AnyOf(sdk.LetRun), mirrorA, mirrorB)
	if err != nil {
		return err
	}
	var shards []model.ExecutionID
	for range 3 {
		s, err := step("index", sdk.AllOf(), unpack)
		if err != nil {
			return err
		}
		shards = append(shards, s)
	}
	report, err := step("report", sdk.Quorum(2, sdk.LetRun), shards...)
	if err != nil {
		return err
	}

	mux := sdk.NewMux()
	for _, kind := range []string{"fetch", "unpack", "index", "report"} {
		mux.Handle(kind, func(ctx context.Context, job *sdk.Job) error {
			if err := job.ReportProgress(ctx, 100, kind+" done"); err != nil {
				return err
			}
			job.SetResult([]byte(kind + " ok"))
			return nil
		})
	}
	// ResolveDependencies: the worker resolves the edges of the members it
	// finishes (a host running the dependency dispatcher does it too).
	w, err := client.NewWorker(ctx, sdk.WorkerConfig{WorkerID: "etl", Lanes: []string{"etl"}, Concurrency: 4,
		ResolveDependencies: true, Logger: logger})
	if err != nil {
		return err
	}
	defer w.Close(context.Background())
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(runCtx, mux.ServeJob) }()

	for {
		st, err := client.State(ctx, report)
		if err != nil {
			return err
		}
		if st.Terminal() {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("report still %s: %w", st.PublicState, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, m := range append([]model.ExecutionID{mirrorA, mirrorB, unpack}, append(shards, report)...) {
		st, err := client.State(ctx, m)
		if err != nil {
			return err
		}
		if st.Kind == "report" || st.Kind == "unpack" {
			fmt.Fprintf(out, "%s: %s\n", st.Kind, st.PublicState)
		}
	}
	return nil
}
