// Command periodic schedules a job every 300 ms and runs it three times.
// The schedule is stored in Valkey; ticks are fired by the periodic
// plugin of the fabric hosts (`fabric run` loads it by default), exactly
// once per tick however many hosts run. To be self-contained this example
// embeds a host that loads only bin/plugins/periodic.wasm (build it with
// `make plugins`; FABRIC_PLUGIN_DIR overrides the directory).
//
//	go run ./examples/periodic                             # a private server for the run
//	FABRIC_URL=redis://127.0.0.1:6379 go run ./examples/periodic
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/sdk"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	// The embedded host takes the driver's own client.
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: url, Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	defer vc.Close()
	dir := os.Getenv("FABRIC_PLUGIN_DIR")
	if dir == "" {
		dir = filepath.Join("bin", "plugins")
	}
	if err := run(ctx, client, vc, dir, logger, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, client *sdk.Client, vc *valkey.Client, pluginDir string, logger *slog.Logger, out io.Writer) error {
	stopHost, err := startHost(ctx, vc, pluginDir, logger)
	if err != nil {
		return err
	}
	defer stopHost()

	if _, err := client.AddPeriodic(ctx, sdk.Periodic{Name: "heartbeat", Every: 300 * time.Millisecond, Kind: "heartbeat"},
		sdk.WithLane("cron"), sdk.WithAttemptTimeout(time.Minute)); err != nil {
		return err
	}
	// A cron schedule is added the same way: Cron: "*/5 * * * *" (UTC).

	beats := make(chan *sdk.Job, 16)
	mux := sdk.NewMux()
	mux.Handle("heartbeat", func(_ context.Context, job *sdk.Job) error {
		beats <- job
		return nil
	})
	w, err := client.NewWorker(ctx, sdk.WorkerConfig{WorkerID: "beats", Lanes: []string{"cron"}, Logger: logger})
	if err != nil {
		return err
	}
	defer w.Close(context.Background())
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(runCtx, mux.ServeJob) }()

	seen := map[string]bool{}
	for n := 1; n <= 3; n++ {
		select {
		case j := <-beats:
			if seen[string(j.ID)] {
				return fmt.Errorf("tick execution %s ran twice", j.ID)
			}
			seen[string(j.ID)] = true
			fmt.Fprintf(out, "heartbeat %d\n", n)
		case <-ctx.Done():
			return fmt.Errorf("waiting for heartbeat %d: %w", n, ctx.Err())
		}
	}
	if err := client.RemovePeriodic(ctx, "heartbeat"); err != nil {
		return err
	}
	list, err := client.ListPeriodic(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "schedules left: %d\n", len(list))
	return nil
}

// startHost runs a fabric host with only the periodic plugin, as
// `fabric run` would with its full default set.
func startHost(ctx context.Context, vc *valkey.Client, pluginDir string, logger *slog.Logger) (func(), error) {
	wasm, err := os.ReadFile(filepath.Join(pluginDir, "periodic.wasm"))
	if err != nil {
		return nil, fmt.Errorf("the periodic plugin (run `make plugins`): %w", err)
	}
	dir, err := os.MkdirTemp("", "fabric-periodic-example-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "periodic.wasm"), wasm, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	h, err := host.New(host.Config{PluginDir: dir, Backend: vc, Logger: logger,
		Plugins: map[string]host.PluginConfig{"periodic": {Interval: 100 * time.Millisecond}}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := h.Start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	select {
	case <-h.Started():
	case <-ctx.Done():
		h.Stop()
		os.RemoveAll(dir)
		return nil, ctx.Err()
	}
	return func() { h.Stop(); os.RemoveAll(dir) }, nil
}
