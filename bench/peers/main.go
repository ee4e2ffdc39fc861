// Command peers runs the comparison workloads of `make bench` on the job
// queues fabric is measured against: hibiken/asynq (Redis) and
// riverqueue/river (Postgres). It lives in its own Go module so the
// product module never depends on either.
//
// Each mode prints one JSON object on stdout and exits; the bench program
// (cmd/fabric-bench) starts it against the same throwaway servers it
// measures fabric on.
//
//	peers asynq-e2e   -socket S -db N -jobs N -workers W -producers P -timeout D
//	peers asynq-delay -socket S -db N -jobs N -spread D -timeout D
//	peers asynq-idle  -socket S -db N -hold D
//	peers asynq-enqueue-opts -socket S -db N -jobs N -producers P -timeout D
//	peers river-e2e   -url U -jobs N -workers W -producers P [-fetch-cooldown D] -timeout D
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// Result is what every mode prints.
type Result struct {
	Mode    string  `json:"mode"`
	Version string  `json:"version"`
	Jobs    int64   `json:"jobs"`
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"per_sec"`
	// Capped is set when the timeout ended the run before every job ran.
	Capped bool `json:"capped,omitempty"`
	// P50Ms and P99Ms are latency percentiles (asynq-delay).
	P50Ms float64 `json:"p50_ms,omitempty"`
	P99Ms float64 `json:"p99_ms,omitempty"`
	MaxMs float64 `json:"max_ms,omitempty"`
	// RSSKiB is the process's resident set at the end (asynq-idle).
	RSSKiB int64 `json:"rss_kib,omitempty"`
}

const (
	asynqVersion = "v0.26.0"
	riverVersion = "v0.51.1"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: peers asynq-e2e|asynq-delay|asynq-idle|river-e2e [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	socket := fs.String("socket", "", "redis unix socket")
	db := fs.Int("db", 0, "redis logical database")
	url := fs.String("url", "", "postgres URL")
	jobs := fs.Int("jobs", 1000, "jobs to run")
	workers := fs.Int("workers", 8, "concurrent handlers")
	producers := fs.Int("producers", 4, "concurrent producers")
	spread := fs.Duration("spread", 5*time.Second, "asynq-delay: due times spread over this long")
	hold := fs.Duration("hold", 3*time.Second, "asynq-idle: how long the idle server runs")
	check := fs.Duration("check-interval", 5*time.Second, "asynq-delay: the forwarder's DelayedTaskCheckInterval (asynq's default 5 s)")
	timeout := fs.Duration("timeout", time.Minute, "cap on the whole run")
	cooldown := fs.Duration("fetch-cooldown", 0, "river-e2e: Config.FetchCooldown (0: River's default, 100 ms)")
	_ = fs.Parse(os.Args[2:])

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var (
		res *Result
		err error
	)
	switch mode {
	case "asynq-e2e":
		res, err = asynqE2E(ctx, asynqOpt(*socket, *db), *jobs, *workers, *producers)
	case "asynq-delay":
		res, err = asynqDelay(ctx, asynqOpt(*socket, *db), *jobs, *spread, *check)
	case "asynq-idle":
		res, err = asynqIdle(ctx, asynqOpt(*socket, *db), *hold)
	case "asynq-enqueue-opts":
		res, err = asynqEnqueueOpts(ctx, asynqOpt(*socket, *db), *jobs, *producers)
	case "river-e2e":
		res, err = riverE2E(ctx, *url, *jobs, *workers, *producers, *cooldown)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "peers %s: %v\n", mode, err)
		os.Exit(1)
	}
	res.Mode = mode
	if res.Seconds > 0 {
		res.PerSec = float64(res.Jobs) / res.Seconds
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

func asynqOpt(socket string, db int) asynq.RedisClientOpt {
	return asynq.RedisClientOpt{Network: "unix", Addr: socket, DB: db, PoolSize: 64}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// asynqServer starts an asynq server with conc handlers running h.
func asynqServer(opt asynq.RedisClientOpt, conc int, check time.Duration, h asynq.HandlerFunc) (*asynq.Server, error) {
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency:              conc,
		Queues:                   map[string]int{"default": 1},
		LogLevel:                 asynq.FatalLevel,
		DelayedTaskCheckInterval: check,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench", h)
	if err := srv.Start(mux); err != nil {
		return nil, fmt.Errorf("asynq server: %w", err)
	}
	return srv, nil
}

// asynqE2E runs producers enqueuing jobs while the server's handlers
// process them: enqueue→handler throughput, the shape fabric's e2e uses.
func asynqE2E(ctx context.Context, opt asynq.RedisClientOpt, jobs, workers, producers int) (*Result, error) {
	var done atomic.Int64
	all := make(chan struct{})
	srv, err := asynqServer(opt, workers, 0, func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(jobs) {
			close(all)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	cl := asynq.NewClient(opt)
	defer cl.Close()
	start := time.Now()
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < jobs; i += producers {
				if _, err := cl.EnqueueContext(ctx, asynq.NewTask("bench", []byte("x"))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	capped := false
	select {
	case <-all:
	case <-ctx.Done():
		capped = true
	}
	return &Result{Version: asynqVersion, Jobs: done.Load(), Seconds: time.Since(start).Seconds(), Capped: capped}, nil
}

// asynqEnqueueOpts measures Client.Enqueue with the options fabric's
// scenario 9 sets: queue, max retry, timeout, process-in (1 h, so nothing
// runs) and a unique task id per job (asynq's idempotent enqueue). asynq
// has no per-task priority or tags.
func asynqEnqueueOpts(ctx context.Context, opt asynq.RedisClientOpt, jobs, producers int) (*Result, error) {
	cl := asynq.NewClient(opt)
	defer cl.Close()
	var done atomic.Int64
	start := time.Now()
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < jobs; i += producers {
				_, err := cl.EnqueueContext(ctx, asynq.NewTask("bench", []byte(`{"n":1}`)),
					asynq.Queue("bench_opts"), asynq.MaxRetry(3), asynq.Timeout(30*time.Second),
					asynq.ProcessIn(time.Hour), asynq.TaskID("job-"+strconv.Itoa(i)))
				if err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	return &Result{Version: asynqVersion, Jobs: done.Load(), Seconds: time.Since(start).Seconds(), Capped: ctx.Err() != nil}, nil
}

// asynqDelay schedules jobs due uniformly over spread (from 1 s after
// the start) and measures due→handler lateness: asynq's forwarder moves
// due tasks from the scheduled set every CheckInterval (5 s default).
func asynqDelay(ctx context.Context, opt asynq.RedisClientOpt, jobs int, spread, check time.Duration) (*Result, error) {
	var (
		mu    sync.Mutex
		lates []float64
	)
	all := make(chan struct{})
	srv, err := asynqServer(opt, 16, check, func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		due, _ := strconv.ParseInt(string(t.Payload()), 10, 64)
		mu.Lock()
		lates = append(lates, float64(now.UnixMicro()-due)/1000)
		if len(lates) == jobs {
			close(all)
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	cl := asynq.NewClient(opt)
	defer cl.Close()
	base := time.Now().Add(time.Second)
	for i := 0; i < jobs; i++ {
		due := base.Add(time.Duration(int64(spread) * int64(i) / int64(max(jobs, 1))))
		due = due.Truncate(time.Millisecond)
		if _, err := cl.EnqueueContext(ctx, asynq.NewTask("bench", []byte(strconv.FormatInt(due.UnixMicro(), 10))), asynq.ProcessAt(due)); err != nil {
			return nil, fmt.Errorf("enqueue: %w", err)
		}
	}
	capped := false
	select {
	case <-all:
	case <-ctx.Done():
		capped = true
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Float64s(lates)
	r := &Result{Version: asynqVersion, Jobs: int64(len(lates)), Capped: capped}
	if n := len(lates); n > 0 {
		r.P50Ms, r.P99Ms, r.MaxMs = lates[n/2], lates[min(n-1, n*99/100)], lates[n-1]
	}
	return r, nil
}

// asynqIdle runs an idle server (default config: its heartbeater,
// forwarder, recoverer, janitor and syncer all poll) for hold and reports
// the process's RSS; the bench program reads the server's commandstats
// around it.
func asynqIdle(ctx context.Context, opt asynq.RedisClientOpt, hold time.Duration) (*Result, error) {
	srv := asynq.NewServer(opt, asynq.Config{LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench", func(context.Context, *asynq.Task) error { return nil })
	if err := srv.Start(mux); err != nil {
		return nil, fmt.Errorf("asynq server: %w", err)
	}
	defer srv.Shutdown()
	start := time.Now()
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	return &Result{Version: asynqVersion, Seconds: time.Since(start).Seconds(), RSSKiB: rssKiB()}, nil
}

// rssKiB reads VmRSS from /proc/self/status.
func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// benchArgs is River's job type for the e2e run.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	done func()
}

func (w *benchWorker) Work(context.Context, *river.Job[benchArgs]) error {
	w.done()
	return nil
}

// riverE2E migrates River's schema into the database at url, then runs
// producers inserting jobs while a River client with workers handlers
// works them.
func riverE2E(ctx context.Context, url string, jobs, workers, producers int, cooldown time.Duration) (*Result, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("river: pool: %w", err)
	}
	defer pool.Close()
	drv := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(drv, nil)
	if err != nil {
		return nil, fmt.Errorf("river: migrator: %w", err)
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	var done atomic.Int64
	all := make(chan struct{})
	ws := river.NewWorkers()
	river.AddWorker(ws, &benchWorker{done: func() {
		if done.Add(1) == int64(jobs) {
			close(all)
		}
	}})
	cl, err := river.NewClient(drv, &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:       ws,
		Logger:        quietLogger(),
		FetchCooldown: cooldown,
	})
	if err != nil {
		return nil, fmt.Errorf("river: client: %w", err)
	}
	if err := cl.Start(ctx); err != nil {
		return nil, fmt.Errorf("river: start: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.Stop(sctx)
	}()
	start := time.Now()
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < jobs; i += producers {
				if _, err := cl.Insert(ctx, benchArgs{N: i}, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("river: insert: %w", err)
	}
	capped := false
	select {
	case <-all:
	case <-ctx.Done():
		capped = true
	}
	return &Result{Version: riverVersion, Jobs: done.Load(), Seconds: time.Since(start).Seconds(), Capped: capped}, nil
}
