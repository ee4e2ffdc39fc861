package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/internal/redact"
	"github.com/fabric-host/fabric/sdk"
)

// runPGFlags are the flags `fabric run` adds for the Postgres backend.
type runPGFlags struct {
	backend *string
	pg      *pgFlags
}

func addRunPostgresFlags(fs *flag.FlagSet) *runPGFlags {
	return &runPGFlags{
		backend: fs.String("backend", "valkey", "valkey or postgres; --postgres-url implies postgres"),
		pg:      addPostgresFlags(fs),
	}
}

// enabled reports whether the run targets Postgres.
func (f *runPGFlags) enabled() (bool, error) {
	switch *f.backend {
	case "postgres":
		return true, nil
	case "valkey":
		return f.pg.url != "", nil
	}
	return false, fmt.Errorf("%w: --backend %q: want valkey or postgres", errUsage, *f.backend)
}

// runPostgresOpts are run's other flags, as runPostgres needs them.
type runPostgresOpts struct {
	pluginDir, cacheDir, statusFile string
	demo                            bool
	// logs are run's --log-level and --log-format (backendFlags.logger,
	// the one parser of both), and its --backend-wait.
	logs *backendFlags
	// trust sets the host's Policy and trusted keys (policy.go).
	trust *trustFlags
	// adminAddr and tokenFile serve the operator console (console_pg.go).
	adminAddr, tokenFile string
}

// runPostgres is `fabric run` on Postgres: it migrates the database (a
// throwaway cluster without --postgres-url), runs the host with the pg_*
// plugins on it (Valkey plugins are loaded but disabled by the host), and the SDK workload on Postgres workers until Ctrl-C or
// --duration, then drains and prints a summary.
func runPostgres(ctx context.Context, env *cliEnv, f *runPGFlags, wf *workloadFlags, o runPostgresOpts) error {
	cfg, err := wf.config()
	if err != nil {
		return err
	}
	log, err := o.logs.logger(env)
	if err != nil {
		return err
	}
	t, err := f.pg.target(ctx, env)
	if err != nil {
		return err
	}
	defer t.Close()
	log = slog.New(redact.Handler(log.Handler(), append(redact.Secrets(t.URL), t.Password)...))
	fmt.Fprintf(env.stdout, "fabric %s on Postgres: %s\n", Version, t.Where)
	pc, err := waitFor(ctx, o.logs.wait, env.stderr, t.Where, func() (*postgres.Client, error) {
		return postgres.Connect(ctx, postgres.ClientConfig{URL: t.URL, Password: t.Password, Logger: log, MaxConns: int32(cfg.Workers*2 + 8)})
	}, postgres.IsUnreachable, nil)
	if err != nil {
		return err
	}
	defer pc.Close()
	if _, err := postgres.Migrate(ctx, pc.Pool(), postgres.MigrateConfig{Progress: env.stdout}); err != nil {
		return err
	}
	h, err := startPostgresHost(ctx, env, pc, o, log)
	if err != nil {
		return err
	}
	if h != nil {
		defer func() {
			printPlugins(env.stdout, h)
			h.Stop()
			h.Close(context.WithoutCancel(ctx))
		}()
	}
	stopConsole, err := startPGConsole(ctx, env.stdout, o.adminAddr, o.tokenFile, pc, h, log)
	if err != nil {
		return err
	}
	defer stopConsole()
	if !o.demo {
		fmt.Fprintln(env.stdout, "host running; Ctrl-C stops it")
		<-ctx.Done()
		return nil
	}
	if _, ok := hostPlugin(h, "pg_delayed_promoter"); !ok {
		fmt.Fprintln(env.stdout, "warning: no pg_delayed_promoter plugin: delayed and retried work will not run again")
	}
	fmt.Fprintln(env.stdout, "demo workload running on Postgres (immediate, delayed, retry; suspend and dag run as immediate); Ctrl-C stops submitting, drains and exits")
	cfg.Audit = f.pg.url == "" // a throwaway cluster holds only the demo's executions
	sum, werr := runPostgresWorkload(ctx, pc, cfg, log, env.stdout)
	fmt.Fprintf(env.stdout, "demo: %s\n", sum)
	return werr
}

// startPostgresHost starts the host on dir with the Postgres pool; only
// plugins granted capabilities.sql (the pg_* scanners) run.
func startPostgresHost(ctx context.Context, env *cliEnv, pc *postgres.Client, o runPostgresOpts, log *slog.Logger) (*host.Host, error) {
	if o.pluginDir == "" {
		return nil, nil
	}
	paths, err := filepath.Glob(filepath.Join(o.pluginDir, "*.wasm"))
	if err != nil || len(paths) == 0 {
		fmt.Fprintf(env.stdout, "no plugins in %s (run `make plugins`); running without plugins\n", o.pluginDir)
		return nil, nil
	}
	// Valkey plugins load disabled: the host runs on Postgres only.
	if o.cacheDir != "" {
		if err := os.MkdirAll(o.cacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("--cache-dir: %w", err)
		}
	}
	hc := host.Config{PluginDir: o.pluginDir, CacheDir: o.cacheDir, Postgres: pc.Pool(),
		Partitions: pc.Partitions(), Logger: log, StatusFile: o.statusFile}
	if err := o.trust.apply(&hc); err != nil {
		return nil, err
	}
	h, err := host.New(hc)
	if err != nil {
		return nil, err
	}
	if err := h.Start(ctx); err != nil {
		h.Close(ctx)
		return nil, err
	}
	select {
	case <-h.Started():
	case <-ctx.Done():
		h.Stop()
		h.Close(context.WithoutCancel(ctx))
		return nil, ctx.Err()
	}
	fmt.Fprintf(env.stdout, "host: %d plugins from %s\n", len(h.Plugins()), o.pluginDir)
	writePluginList(env.stdout, h.Plugins())
	return h, nil
}

// pgWorkloadSummary counts what the Postgres workload did.
type pgWorkloadSummary struct {
	submitted, completed, retried, delayed atomic.Int64
	start                                  time.Time
	elapsed                                time.Duration // final; 0 while running
}

func (s *pgWorkloadSummary) String() string {
	el := s.elapsed
	if el == 0 {
		el = time.Since(s.start)
	}
	rate := float64(s.completed.Load()) / max(el.Seconds(), 1e-9)
	return fmt.Sprintf("submitted %d, completed %d (%.0f/s over %s), retried %d, delayed %d",
		s.submitted.Load(), s.completed.Load(), rate, el.Round(time.Millisecond), s.retried.Load(), s.delayed.Load())
}

// Kinds of the Postgres workload's handlers.
const (
	pgKindImmediate = "immediate"
	pgKindDelayed   = "delayed"
	pgKindRetry     = "retry"
)

// runPostgresWorkload submits work at cfg.Rate over cfg.Lanes with SDK
// producers and runs cfg.Workers Postgres workers until ctx ends or
// cfg.Duration passes, then drains for up to cfg.DrainTimeout.
func runPostgresWorkload(ctx context.Context, pc *postgres.Client, cfg workloadConfig, log *slog.Logger, out io.Writer) (*pgWorkloadSummary, error) {
	sum := &pgWorkloadSummary{}
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Postgres: pc, Logger: log})
	if err != nil {
		return sum, err
	}
	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	var wg sync.WaitGroup
	workers := make([]*sdk.Worker, 0, cfg.Workers)
	for i := range cfg.Workers {
		w, err := sdk.ConnectPostgres(wctx, pc, sdk.WorkerConfig{WorkerID: fmt.Sprintf("demo-%d", i), Lanes: cfg.Lanes,
			Concurrency: cfg.Concurrency, Logger: log})
		if err != nil {
			return sum, err
		}
		workers = append(workers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Run(wctx, func(_ context.Context, job *sdk.Job) error {
				switch {
				case job.Kind == pgKindRetry && job.Attempt == 0:
					sum.retried.Add(1)
					return errors.New("first attempt fails by design")
				case job.Kind == pgKindDelayed && job.AttemptType == "initial":
					sum.delayed.Add(1)
					return sdk.DelayFor(200 * time.Millisecond)
				}
				sum.completed.Add(1)
				return nil
			})
		}()
	}
	start := time.Now()
	sum.start = start
	sctx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	weights := []struct {
		kind string
		w    int
	}{
		{pgKindImmediate, cfg.Mix[kindImmediate] + cfg.Mix[kindSuspend] + cfg.Mix[kindDAG]},
		{pgKindDelayed, cfg.Mix[kindDelayed]},
		{pgKindRetry, cfg.Mix[kindRetry]},
	}
	total := 0
	for _, k := range weights {
		total += k.w
	}
	pick := func() string {
		n := rand.IntN(max(total, 1))
		for _, k := range weights {
			if n < k.w {
				return k.kind
			}
			n -= k.w
		}
		return pgKindImmediate
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	tick := time.NewTicker(interval)
	report := time.NewTicker(time.Second)
	defer tick.Stop()
	defer report.Stop()
	var werr error
submit:
	for i := 0; ; i++ {
		select {
		case <-sctx.Done():
			break submit
		case <-report.C:
			fmt.Fprintf(out, "  %s\n", sum)
			continue
		case <-tick.C:
		}
		kind := pick()
		spec := sdk.ExecutionSpec{Lane: cfg.Lanes[i%len(cfg.Lanes)], Kind: kind}
		if kind == pgKindRetry {
			spec.Policy = &sdk.Policy{MaxRetries: 1, Backoff: sdk.FixedBackoff(100 * time.Millisecond)}
		}
		// The create runs to its end once begun, as the Valkey workload's
		// do: one cut off by the duration or a Ctrl-C could commit yet
		// return the context's error, leaving an execution the summary
		// never counted (submitted N, completed N+1) and the drain never
		// waited for.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(sctx), 30*time.Second)
		_, err := client.CreateExecution(cctx, spec)
		ccancel()
		if err != nil {
			werr = fmt.Errorf("demo: create execution: %w", err)
			break
		}
		sum.submitted.Add(1)
	}
	// Drain: wait for every submitted execution to complete.
	deadline := time.Now().Add(cfg.DrainTimeout)
	for sum.completed.Load() < sum.submitted.Load() && time.Now().Before(deadline) {
		t := time.NewTimer(50 * time.Millisecond)
		<-t.C
	}
	sum.elapsed = time.Since(start)
	stopWorkers()
	wg.Wait()
	for _, w := range workers {
		w.Close(context.WithoutCancel(ctx))
	}
	if n := sum.submitted.Load() - sum.completed.Load(); n > 0 && werr == nil {
		werr = fmt.Errorf("%d submitted executions did not complete within the drain timeout %s", n, cfg.DrainTimeout)
	}
	if cfg.Audit {
		rep, err := audit.Postgres(context.WithoutCancel(ctx), pc.Pool(), audit.Options{})
		if err != nil {
			return sum, errors.Join(werr, fmt.Errorf("demo: audit: %w", err))
		}
		fmt.Fprintf(out, "demo: audit: %s\n", rep.Summary())
		for _, v := range rep.Violations[:min(5, len(rep.Violations))] {
			fmt.Fprintf(out, "demo: left behind: %s\n", v)
		}
		if !rep.OK() && werr == nil {
			werr = fmt.Errorf("demo: %d executions left behind (neither ended nor waiting for a stated reason)", len(rep.Violations)+rep.More)
		}
	}
	return sum, werr
}
