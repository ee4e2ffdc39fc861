// Command fabric-bench measures fabric side by side with the raw backend,
// hibiken/asynq and riverqueue/river on throwaway servers it starts
// itself, and writes BENCHMARKS.md: one table per scenario with fabric's
// figure, the comparison's figure from the same run, the ratio and the
// machine.
//
//	fabric-bench [-size full|smoke] [-out BENCHMARKS.md] [-only 1,8] [-peers bin/fabric-bench-peers]
//
// Scenarios (each bounded in size and time so -size full fits in 10
// minutes on 2 cores):
//
//  1. e2e throughput on Valkey: SDK workers vs raw LPUSH/BRPOP vs asynq
//  2. e2e throughput on Postgres: backend/postgres ops vs River
//  3. DAG latency: 10-level linear flow, completion→child eligible, on
//     Valkey (engine and worker-side resolution) and Postgres (engine)
//  4. promotion lateness: delayed executions, due→eligible
//  5. scanner cost: one 256-partition cycle wasm vs native; idle commands/s
//  6. hot-swap: file written → new version serving; missed cycles
//  7. memory: host RSS with the default plugin set
//  8. physical limit: FCALL of a no-op, unpipelined and pipelined
//  9. enqueue with options
//  10. timeout detection lateness
//  11. hostile plugins: the stock set's sweep cadence beside the hostile set
//  12. one lane on a 3-primary cluster: spread vs default lane (per-node
//     command shares, throughput, a per-node capacity projection)
//  13. shadow cost to the live cycle
//  14. execution fast path: server CPU and commands per execution of the
//     SDK (notifications on and off) against the bare functions and the
//     contract floor
//  15. start-up: the stock plugin set compiled from an empty cache, and
//     `make run` to its first status line on a warm machine
//
// The comparison workloads run in bench/peers, a separate Go module, so
// the product module does not depend on asynq or River.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/valkey"
)

// Size bounds every scenario.
type Size struct {
	Name string
	// E2EJobs are executions per throughput run; Workers the handler
	// counts compared; Producers submit concurrently.
	E2EJobs   int
	Workers   []int
	Producers int
	// PGJobs and PGWorkers size scenario 2 (6,000 jobs, 2,000 until
	// 2026-12-02: a run of 1-2 s was a third start-up — the first plans and
	// catalog loads of each new connection); PGRounds is how many times
	// fabric and River (at its 1 ms cooldown) each run per W, alternating
	// (the rows report the medians).
	PGJobs    int
	PGWorkers []int
	PGRounds  int
	// DAGFlows linear flows of DAGLevels levels (scenario 3).
	DAGFlows, DAGLevels int
	// PromoteJobs delayed executions due over PromoteSpread (scenario 4).
	PromoteJobs   int
	PromoteSpread time.Duration
	// AsynqCheck is asynq's forwarder interval (its default 5 s in full).
	AsynqCheck time.Duration
	// ScanCycles full cycles timed per variant (scenario 5); IdleHold is
	// the idle window for commands/s and RSS (scenarios 5, 7).
	ScanCycles int
	IdleHold   time.Duration
	// DemoHold is the window of scenario 7's demo-workload row.
	DemoHold time.Duration
	// Swaps hot swaps (scenario 6).
	Swaps int
	// LimitFor is how long each FCALL no-op variant runs (scenario 8).
	LimitFor time.Duration
	// RunCap caps any one measured run; ScenarioCap a whole scenario.
	RunCap, ScenarioCap time.Duration
	// Plugins limits the "default plugin set" of scenarios 5 and 7 to
	// these names (nil: host.DefaultPlugins).
	Plugins []string
	// GoBench runs the Go benchmarks too; GoBenchTime is their -benchtime.
	GoBench     bool
	GoBenchTime string
}

var sizes = map[string]Size{
	"full": {Name: "full", E2EJobs: 20_000, Workers: []int{1, 8}, Producers: 4,
		PGJobs: 6000, PGWorkers: []int{1, 8}, PGRounds: 3, DAGFlows: 20, DAGLevels: 10,
		PromoteJobs: 10_000, PromoteSpread: 5 * time.Second, AsynqCheck: 5 * time.Second, ScanCycles: 10, IdleHold: 5 * time.Second, DemoHold: 60 * time.Second,
		Swaps: 20, LimitFor: 3 * time.Second, RunCap: 40 * time.Second, ScenarioCap: 3 * time.Minute,
		GoBench: true, GoBenchTime: "1s"},
	"smoke": {Name: "smoke", E2EJobs: 60, Workers: []int{2}, Producers: 2,
		PGJobs: 40, PGWorkers: []int{2}, PGRounds: 1, DAGFlows: 1, DAGLevels: 3,
		PromoteJobs: 40, PromoteSpread: 300 * time.Millisecond, AsynqCheck: 200 * time.Millisecond, ScanCycles: 1, IdleHold: 300 * time.Millisecond, DemoHold: 5 * time.Second,
		Swaps: 2, LimitFor: 200 * time.Millisecond, RunCap: 60 * time.Second, ScenarioCap: 4 * time.Minute,
		Plugins: []string{"delayed_promoter", "lease_expiry"}},
}

// benchEnv is what scenarios share: the servers, the peer binary, paths,
// and scenario 8's limit.
type benchEnv struct {
	size    Size
	log     *slog.Logger
	out     io.Writer // progress lines
	repo    string    // repository root
	peers   string    // peer binary ("" when unavailable)
	peerErr error
	cache   string // wazero compilation cache dir

	vsrv   *valkey.Server
	stats  *valkey.Client // db 0, for INFO
	nextDB int
	pgsrv  *postgres.Server
	pgErr  error
	pgNext int
	// pgTemplate is a database fabric's migrations ran on once; fabric's
	// runs clone it (0: not made yet).
	pgTemplate string

	// limit is the best no-op FCALL rate and lockstep the one-caller
	// lockstep rate (0 until scenario 8 ran).
	limit, lockstep float64
}

type scenarioFunc func(ctx context.Context, e *benchEnv, sc *Scenario) error

type scenarioDef struct {
	id    int
	title string
	run   scenarioFunc
}

// scenarioCaps bound the scenarios that may take longer than
// Size.ScenarioCap (2: River with its default config runs to its 40 s
// run cap at each W, twice, beside fabric's runs and the migrations, and
// the W=8 rows came last and were cut on a loaded machine; 7: its
// demo-workload row runs `fabric run` for a minute; 15: a cold compile of
// the stock set on a loaded machine, then `make run` twice).
var scenarioCaps = map[int]time.Duration{2: 6 * time.Minute, 7: 5 * time.Minute, 15: 8 * time.Minute}

// scenarios in run order: 8 first so every figure can be shown as a
// fraction of the server's limit.
var scenarios = []scenarioDef{
	{8, "Physical limit: FCALL of a no-op", runLimit},
	{1, "e2e throughput, Valkey", runValkeyE2E},
	{2, "e2e throughput, Postgres", runPostgresE2E},
	{3, "DAG latency, linear flow", runDAG},
	{4, "Promotion lateness", runPromotion},
	{5, "Scanner cost", runScannerCost},
	{6, "Hot-swap", runSwap},
	{7, "Memory", runMemory},
	{9, "Enqueue with options", runEnqueueOpts},
	{10, "Timeout detection lateness", runExpiry},
	{11, "Hostile plugins beside the stock set", runHostile},
	{12, "One lane on a 3-primary cluster: spread vs default", runSpread},
	{13, "Shadow cost to the live cycle", runShadowCost},
	{14, "Execution fast path: where server CPU per execution goes", runFastPath},
	{15, "Start-up: cold compile and `make run` to the first live view", runStartup},
}

func main() {
	if isChild() {
		os.Exit(runChild(os.Args[1:]))
	}
	os.Exit(benchMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func benchMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fabric-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizeName := fs.String("size", "full", "scenario sizes: full (≤10 min on 2 cores) or smoke (seconds)")
	outPath := fs.String("out", "BENCHMARKS.md", "report to write (\"-\": stdout)")
	only := fs.String("only", "", "comma-separated scenario numbers to run (default all)")
	peers := fs.String("peers", "", "prebuilt bench/peers binary (default: build it with go build)")
	repo := fs.String("repo", ".", "repository root (for bench/peers, bin/plugins, testdata/plugins)")
	logLevel := fs.String("log-level", "error", "log level of fabric's components")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	size, ok := sizes[*sizeName]
	if !ok {
		fmt.Fprintf(stderr, "fabric-bench: unknown -size %q (full, smoke)\n", *sizeName)
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "fabric-bench: -log-level: %v\n", err)
		return 2
	}
	want := map[int]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				fmt.Fprintf(stderr, "fabric-bench: -only %q: %v\n", *only, err)
				return 2
			}
			want[n] = true
		}
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		fmt.Fprintln(stderr, "fabric-bench:", err)
		return 1
	}
	e := &benchEnv{size: size, out: stdout, repo: root,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))}
	if base, err := os.UserCacheDir(); err == nil {
		e.cache = filepath.Join(base, "fabric", "wazero")
	}
	started := time.Now()
	machine := detectMachine()

	vsrv, err := valkey.StartServer(ctx, valkey.ServerConfig{Databases: 128, Logger: e.log})
	if err != nil {
		fmt.Fprintln(stderr, "fabric-bench: start server:", err)
		return 1
	}
	defer vsrv.Stop()
	e.vsrv = vsrv
	if e.stats, err = e.dialDB(ctx, 0); err != nil {
		fmt.Fprintln(stderr, "fabric-bench: connect:", err)
		return 1
	}
	defer e.stats.Close()
	machine.Valkey = serverVersion(ctx, e)
	defer e.stopPostgres()

	e.peers, e.peerErr = *peers, nil
	if e.peers == "" {
		e.peers, e.peerErr = buildPeers(ctx, root, stdout)
	}

	var done []*Scenario
	for _, def := range scenarios {
		if len(want) > 0 && !want[def.id] {
			continue
		}
		sc := &Scenario{ID: def.id, Title: def.title}
		fmt.Fprintf(stdout, "== %d. %s\n", def.id, def.title)
		sctx, cancel := context.WithTimeout(ctx, max(size.ScenarioCap, scenarioCaps[def.id]))
		t0 := time.Now()
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return def.run(sctx, e, sc)
		}()
		cancel()
		sc.Elapsed = time.Since(t0)
		if err != nil {
			sc.Err = err
			fmt.Fprintf(stdout, "   FAILED: %v\n", err)
		}
		for _, r := range sc.Rows {
			if r.Missing != "" {
				fmt.Fprintf(stdout, "   %-46s %s\n", r.Measure, r.Missing)
				continue
			}
			fmt.Fprintf(stdout, "   %-46s fabric %-12s %s %-12s ratio %s\n", r.Measure, fmtNum(r.Fabric, r.Unit), r.Versus, fmtNum(r.Peer, r.Unit), fmtRatio(r.ratio()))
		}
		done = append(done, sc)
	}
	if e.pgsrv != nil {
		machine.Postgres = e.pgVersion(ctx)
	} else {
		machine.Postgres = "not started"
	}

	var gob string
	if size.GoBench && len(want) == 0 {
		fmt.Fprintln(stdout, "== Go benchmarks")
		gob = runGoBench(ctx, e)
	}

	machine.LoadEnd = loadAvg()
	var buf bytes.Buffer
	writeMarkdown(&buf, machine, size.Name, started, time.Since(started), done, gob)
	if *outPath == "-" {
		_, _ = stdout.Write(buf.Bytes())
	} else if err := os.WriteFile(*outPath, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintln(stderr, "fabric-bench:", err)
		return 1
	} else {
		fmt.Fprintf(stdout, "wrote %s in %s\n", *outPath, time.Since(started).Round(time.Second))
	}
	failed := 0
	for _, sc := range done {
		if sc.Err != nil {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "fabric-bench: %d scenarios failed\n", failed)
		return 1
	}
	return 0
}

// buildPeers builds bench/peers (its own module; the first build
// downloads asynq and River from the module proxy).
func buildPeers(ctx context.Context, root string, progress io.Writer) (string, error) {
	dir, err := os.MkdirTemp("", "fabric-bench-peers-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "peers")
	fmt.Fprintln(progress, "building bench/peers (asynq, River)")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, "bench", "peers")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build bench/peers: %w: %s", err, lastLines(out, 5))
	}
	return bin, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// serverVersion is "redis-server 7.0.15" (or valkey's).
func serverVersion(ctx context.Context, e *benchEnv) string {
	c, err := e.dial(ctx)
	if err != nil {
		return "unknown"
	}
	defer c.Close()
	raw := c.Raw()
	info, err := raw.Do(ctx, raw.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "unknown"
	}
	name, ver := filepath.Base(e.vsrv.Binary()), ""
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			ver = v
		} else if v, ok := strings.CutPrefix(line, "redis_version:"); ok && ver == "" {
			ver = v
		}
	}
	return name + " " + ver
}

// freshDB returns an unused logical database number.
func (e *benchEnv) freshDB() int {
	e.nextDB++
	return e.nextDB
}

// dial connects fabric's client to a fresh logical database.
func (e *benchEnv) dial(ctx context.Context) (*valkey.Client, error) {
	return e.dialDB(ctx, e.freshDB())
}

func (e *benchEnv) dialDB(ctx context.Context, db int) (*valkey.Client, error) {
	return valkey.Dial(ctx, valkey.ClientConfig{URL: e.vsrv.URL(), DB: db, Logger: e.log})
}

// postgresURL starts the throwaway cluster on first use and returns the
// URL of a fresh database in it.
// migratedPostgresURL returns a fresh database with fabric's schema, cloned
// from a template migrated once (a migration takes a minute on a loaded
// machine; a clone seconds).
func (e *benchEnv) migratedPostgresURL(ctx context.Context) (string, error) {
	if e.pgTemplate == "" {
		url, err := e.postgresURL(ctx)
		if err != nil {
			return "", err
		}
		c, err := postgres.Connect(ctx, postgres.ClientConfig{URL: url, Logger: e.log})
		if err != nil {
			return "", err
		}
		_, err = postgres.Migrate(ctx, c.Pool(), postgres.MigrateConfig{})
		c.Close()
		if err != nil {
			return "", err
		}
		e.pgTemplate = fmt.Sprintf("bench%d", e.pgNext)
	}
	e.pgNext++
	name := fmt.Sprintf("bench%d", e.pgNext)
	c, err := postgres.Connect(ctx, postgres.ClientConfig{URL: e.pgsrv.URL("postgres"), Logger: e.log})
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Pool().Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+e.pgTemplate+" STRATEGY FILE_COPY"); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return e.pgsrv.URL(name), nil
}

func (e *benchEnv) postgresURL(ctx context.Context) (string, error) {
	if e.pgsrv == nil && e.pgErr == nil {
		e.pgsrv, e.pgErr = postgres.StartServer(ctx, postgres.ServerConfig{Logger: e.log, MaxConnections: 200})
	}
	if e.pgErr != nil {
		return "", fmt.Errorf("postgres cluster: %w", e.pgErr)
	}
	e.pgNext++
	name := fmt.Sprintf("bench%d", e.pgNext)
	c, err := postgres.Connect(ctx, postgres.ClientConfig{URL: e.pgsrv.URL("postgres"), Logger: e.log})
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Pool().Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return e.pgsrv.URL(name), nil
}

func (e *benchEnv) pgVersion(ctx context.Context) string {
	c, err := postgres.Connect(ctx, postgres.ClientConfig{URL: e.pgsrv.URL("postgres"), Logger: e.log})
	if err != nil {
		return "unknown"
	}
	defer c.Close()
	var v string
	if err := c.Pool().QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown"
	}
	return "PostgreSQL " + strings.Fields(v)[0]
}

func (e *benchEnv) stopPostgres() {
	if e.pgsrv != nil {
		_ = e.pgsrv.Stop()
	}
}

// peer runs one bench/peers mode and decodes its JSON result.
func (e *benchEnv) peer(ctx context.Context, mode string, args ...string) (*peerResult, error) {
	if e.peers == "" {
		return nil, fmt.Errorf("bench/peers unavailable: %w", e.peerErr)
	}
	cmd := exec.CommandContext(ctx, e.peers, append([]string{mode}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("peers %s: %w: %s", mode, err, lastLines(stderr.Bytes(), 5))
	}
	return decodePeer(out)
}

// errNotAvailable marks a figure that needs work not merged yet.
var errNotAvailable = errors.New("not available")

func capArg(d time.Duration) string { return d.String() }
