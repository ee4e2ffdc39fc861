package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

func init() {
	register(&command{
		name:    "demo",
		summary: "Run a workload generator with SDK workers (immediate, delayed, retrying, suspending and DAG work), printing rates each second until Ctrl-C or --duration.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			b := addBackendFlags(fs)
			wf := addWorkloadFlags(fs)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				cfg, err := wf.config()
				if err != nil {
					return err
				}
				cfg.PromoteInline, cfg.ResolveInline = true, true
				conn, err := b.connect(ctx, env)
				if err != nil {
					return err
				}
				defer conn.Close()
				secret, err := wf.secretFor(ctx, conn, env.stdout)
				if err != nil {
					return err
				}
				if err := conn.Client.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: cfg.Lanes, WaitpointHMACSecret: secret}); err != nil {
					return err
				}
				fmt.Fprintf(env.stdout, "fabric %s demo on %s; Ctrl-C stops submitting, drains and exits\n", Version, conn.Where)
				cfg.Logger = conn.Logger
				if conn.Server != nil {
					cfg.Audit = valkeyAudit(conn.Client)
				}
				cfg.AuditOnly = valkeyAuditOnly(conn.Client)
				sum, err := runWorkload(ctx, conn.Client, cfg, env.stdout)
				fmt.Fprintf(env.stdout, "demo: %s\n", sum)
				return err
			}
		},
	})
}

// workloadFlags are the flags `fabric demo` and `fabric run` share.
type workloadFlags struct {
	duration, drain    *time.Duration
	rate               *float64
	mix, lanes, secret *string
	workers, conc      *int
}

func addWorkloadFlags(fs *flag.FlagSet) *workloadFlags {
	def := defaultWorkloadConfig()
	return &workloadFlags{
		duration: fs.Duration("duration", 0, "stop submitting after this long, drain and exit (0: run until Ctrl-C)"),
		rate:     fs.Float64("rate", def.Rate, "work items submitted per second (a DAG item is one flow)"),
		mix:      fs.String("mix", formatMix(def.Mix), "weights of the work kinds: immediate, delayed, retry, suspend, dag"),
		lanes:    fs.String("lanes", strings.Join(def.Lanes, ","), "comma-separated lanes the workload uses"),
		workers:  fs.Int("workers", def.Workers, "SDK workers"),
		conc:     fs.Int("concurrency", def.Concurrency, "handlers per worker"),
		drain:    fs.Duration("drain-timeout", def.DrainTimeout, "on exit, how long to wait for submitted work to finish"),
		secret: fs.String("waitpoint-hmac-secret", os.Getenv("FF_WAITPOINT_HMAC_SECRET"),
			"hex secret for waitpoint tokens, installed where none is (default $FF_WAITPOINT_HMAC_SECRET; a random one for a private server)"),
	}
}

// config validates the flags into a workload config (usage errors).
func (w *workloadFlags) config() (workloadConfig, error) {
	m, err := parseMix(*w.mix)
	if err != nil {
		return workloadConfig{}, fmt.Errorf("%w: --mix: %v", errUsage, err)
	}
	cfg := workloadConfig{Duration: *w.duration, Rate: *w.rate, Mix: m, Lanes: splitList(*w.lanes),
		Workers: *w.workers, Concurrency: *w.conc, DrainTimeout: *w.drain}
	if err := cfg.validate(); err != nil {
		return cfg, fmt.Errorf("%w: %v", errUsage, err)
	}
	if _, err := hex.DecodeString(*w.secret); err != nil {
		return cfg, fmt.Errorf("%w: --waitpoint-hmac-secret must be hex: %v", errUsage, err)
	}
	return cfg, nil
}

// secretFor returns the waitpoint secret to install: the flag's; a
// random one on a private server (whose data dies with it); and on an
// existing server whose keystore lacks one, a random one, said on out
// with how to choose it — without a secret every suspend fails with
// hmac_secret_not_initialized. A server that has one keeps it.
func (w *workloadFlags) secretFor(ctx context.Context, conn *backendConn, out io.Writer) (string, error) {
	switch {
	case *w.secret != "":
		return *w.secret, nil
	case conn.Server != nil:
		return randomHex(32), nil
	}
	missing, err := conn.Client.WaitpointHMACMissing(ctx)
	if err != nil {
		return "", fmt.Errorf("check the waitpoint secret: %w", err)
	}
	if missing == 0 {
		return "", nil
	}
	msg := fmt.Sprintf("waitpoint HMAC secret: none on %s (%d of %d flow partitions) and none given; installing a random one. "+
		"Choose it with --waitpoint-hmac-secret or FF_WAITPOINT_HMAC_SECRET (hex); every FlowFabric server of this deployment must use the same",
		conn.Where, missing, conn.Client.Partitions().Flow)
	fmt.Fprintln(out, msg)
	conn.Logger.Info(msg) // said on the output already; the log has it at info
	return randomHex(32), nil
}

// Work kinds of the demo workload.
const (
	kindImmediate = "immediate"
	kindDelayed   = "delayed"
	kindRetry     = "retry"
	kindSuspend   = "suspend"
	kindDAG       = "dag"
)

var workKinds = []string{kindImmediate, kindDelayed, kindRetry, kindSuspend, kindDAG}

// workloadConfig configures runWorkload. Zero fields take the defaults of
// defaultWorkloadConfig.
type workloadConfig struct {
	// Duration stops submitting after this long; 0 runs until ctx ends.
	Duration time.Duration
	// Rate is work items submitted per second (a DAG item is one flow of
	// four executions).
	Rate float64
	// Mix weighs the work kinds (immediate, delayed, retry, suspend, dag).
	Mix map[string]int
	// Lanes are spread over round-robin.
	Lanes []string
	// Workers and Concurrency size the SDK workers.
	Workers, Concurrency int
	// DrainTimeout bounds the wait for submitted work on exit.
	DrainTimeout time.Duration
	// PromoteInline and ResolveInline make the workers promote due
	// delayed work and resolve flow edges themselves, for runs without
	// the delayed-promoter scanner and the completion listener.
	PromoteInline, ResolveInline bool
	// Report is the rate-printing interval (1s).
	Report time.Duration
	// Logger receives SDK logs (discarded when nil).
	Logger *slog.Logger
	// Audit, when set, checks every execution of the deployment after
	// the drain (internal/audit: audit.Valkey, audit.Postgres): each ended
	// or states why it waits. Set for a private server or cluster, whose
	// executions are all the demo's.
	Audit func(ctx context.Context) (*audit.Report, error)
	// AuditOnly, when set, checks the given executions (the demo's own
	// not terminal after the drain) on any deployment, shared or not:
	// each must state why it waits (audit.Options.Only).
	AuditOnly func(ctx context.Context, ids map[string]bool) (*audit.Report, error)
}

// valkeyAudit is workloadConfig.Audit on a Valkey deployment.
func valkeyAudit(c *valkey.Client) func(context.Context) (*audit.Report, error) {
	return func(ctx context.Context) (*audit.Report, error) { return audit.Valkey(ctx, c, audit.Options{}) }
}

// valkeyAuditOnly is workloadConfig.AuditOnly on a Valkey deployment.
func valkeyAuditOnly(c *valkey.Client) func(context.Context, map[string]bool) (*audit.Report, error) {
	return func(ctx context.Context, ids map[string]bool) (*audit.Report, error) {
		return audit.Valkey(ctx, c, audit.Options{Only: ids})
	}
}

func defaultWorkloadConfig() workloadConfig {
	return workloadConfig{Rate: 100, Lanes: []string{"demo-a", "demo-b", "demo-c"}, Workers: 4, Concurrency: 8,
		DrainTimeout: 30 * time.Second, Report: time.Second,
		Mix: map[string]int{kindImmediate: 50, kindDelayed: 15, kindRetry: 15, kindSuspend: 10, kindDAG: 10}}
}

func (c *workloadConfig) fill() {
	d := defaultWorkloadConfig()
	c.Rate = cmp.Or(c.Rate, d.Rate)
	if len(c.Mix) == 0 {
		c.Mix = d.Mix
	}
	if len(c.Lanes) == 0 {
		c.Lanes = d.Lanes
	}
	c.Workers = cmp.Or(c.Workers, d.Workers)
	c.Concurrency = cmp.Or(c.Concurrency, d.Concurrency)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, d.DrainTimeout)
	c.Report = cmp.Or(c.Report, d.Report)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

func (c *workloadConfig) validate() error {
	if c.Rate < 0 || c.Rate > 100000 {
		return fmt.Errorf("rate %v out of range 0..100000", c.Rate)
	}
	if c.Workers < 0 || c.Concurrency < 0 || c.Duration < 0 || c.DrainTimeout < 0 {
		return errors.New("workers, concurrency and durations must not be negative")
	}
	for _, l := range c.Lanes {
		if err := sdk.ValidateLane(l); err != nil {
			return err
		}
	}
	total := 0
	for k, w := range c.Mix {
		if !knownKind(k) || w < 0 {
			return fmt.Errorf("bad mix entry %s=%d", k, w)
		}
		total += w
	}
	if len(c.Mix) > 0 && total == 0 {
		return errors.New("mix weights sum to 0")
	}
	return nil
}

func knownKind(k string) bool {
	for _, x := range workKinds {
		if x == k {
			return true
		}
	}
	return false
}

// parseMix parses "immediate=50,delayed=10,...".
func parseMix(s string) (map[string]int, error) {
	m := map[string]int{}
	for _, f := range splitList(s) {
		k, v, ok := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 || !knownKind(k) {
			return nil, fmt.Errorf("%q: want kind=weight with kind one of %s", f, strings.Join(workKinds, ", "))
		}
		m[k] = n
	}
	return m, nil
}

func formatMix(m map[string]int) string {
	var parts []string
	for _, k := range workKinds {
		if w, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%d", k, w))
		}
	}
	return strings.Join(parts, ",")
}

// workloadSummary is what runWorkload did.
type workloadSummary struct {
	// Submitted counts work items per kind; Executions counts executions
	// created (a DAG item creates four).
	Submitted  map[string]int64
	Executions int64
	// Terminal counts finished executions by public state.
	Terminal map[string]int64
	// Unfinished is executions still not terminal when the drain ended.
	Unfinished int
	// Worker counters summed over the workers.
	Workers sdk.Stats
	Elapsed time.Duration
	// Retried counts transient backend errors waited out (BUSY, LOADING,
	// connection resets); Dropped the items given up on after
	// demoRetryFor of them.
	Retried, Dropped int64
	// Audit is the check after the drain (workloadConfig.Audit), or nil.
	Audit *audit.Report
}

func (s workloadSummary) String() string {
	var sub, term []string
	for _, k := range workKinds {
		if n := s.Submitted[k]; n > 0 {
			sub = append(sub, fmt.Sprintf("%s=%d", k, n))
		}
	}
	keys := make([]string, 0, len(s.Terminal))
	for k := range s.Terminal {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		term = append(term, fmt.Sprintf("%s=%d", k, s.Terminal[k]))
	}
	rate := 0.0
	if s.Elapsed > 0 {
		rate = float64(s.Workers.Completed) / s.Elapsed.Seconds()
	}
	return fmt.Sprintf("%d executions (%s) in %s; terminal: %s; unfinished %d; workers: %d claimed, %d completed (%.0f/s), %d retries, %d suspended, %d resumed, %d delayed, %d handed back",
		s.Executions, strings.Join(sub, " "), s.Elapsed.Round(time.Millisecond), strings.Join(term, " "), s.Unfinished,
		s.Workers.Claimed, s.Workers.Completed, rate, s.Workers.Retried, s.Workers.Suspended, s.Workers.Resumed,
		s.Workers.Delayed, s.Workers.HandedBack) + s.transient()
}

func (s workloadSummary) transient() string {
	if s.Retried == 0 && s.Dropped == 0 {
		return ""
	}
	return fmt.Sprintf("; backend: %d transient errors retried, %d items dropped", s.Retried, s.Dropped)
}

// workload is one runWorkload's shared state.
type workload struct {
	cfg     workloadConfig
	c       *sdk.Client
	out     io.Writer
	workers []*sdk.Worker

	mu        sync.Mutex
	pending   map[model.ExecutionID]struct{}
	submitted map[string]int64
	terminal  map[string]int64
	execs     atomic.Int64
	signals   chan *sdk.Suspension
	transient transientLog
	// parked holds the delayed items the handler has parked once
	// (sdk.DelayFor): each is delayed at its create and again by its
	// handler, the two ways work waits.
	parked sync.Map
}

// rateLine is the workload's progress line: the phase, time since the
// start, executions created and completed per second, then the totals
// (created, completed, retries, suspended, resumed, delayed, running —
// in a handler now — and pending; from 10,000 on as 12k, 1.2M, 345M).
// It fits a 160-column terminal behind the live view's "workload" label
// for any run up to 10^5 seconds and 10^5 executions per second.
func rateLine(phase string, elapsed time.Duration, created, completed float64, totals []int64) string {
	labels := []string{"created", "done", "retries", "suspended", "resumed", "delayed", "running", "pending"}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %5.0fs %5.0f/s in %5.0f/s completed ", phase, elapsed.Seconds(), created, completed)
	for i, n := range totals {
		fmt.Fprintf(&b, " %s %s", labels[i], shortCount(n))
	}
	return b.String()
}

// shortCount is n in at most 4 characters: exactly below 10,000, else
// with 2 or 3 digits and k, M, G or T (12k, 999k, 1.2M, 345M).
func shortCount(n int64) string {
	if n < 10_000 {
		return strconv.FormatInt(n, 10)
	}
	v, unit := float64(n), ""
	for _, u := range []string{"k", "M", "G", "T"} {
		v, unit = v/1000, u
		if v < 999.5 {
			break
		}
	}
	prec := 0
	if v < 9.95 {
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + unit
}

// runWorkload is the demo workload on either backend: b is a
// *valkey.Client, a *postgres.Client or a backend.Driver, and everything
// it does goes through the SDK's public API over that driver (no key, no
// SQL). It submits the configured mix at cfg.Rate — immediate work,
// delayed work (delayed at its create, then parked once more by its
// handler), work that fails twice and is retried with backoff, work that
// suspends on a waitpoint until the workload signals it, and diamond
// flows (root → left, right → join) — and runs SDK workers on it,
// printing one rate line per cfg.Report to out, until ctx ends or
// cfg.Duration passes. It then stops submitting, keeps the workers (and
// signal delivery) running until every submitted execution is terminal
// or cfg.DrainTimeout passes, and stops the workers gracefully (leases
// handed back), so nothing stays leased; cfg.Audit then checks that
// nothing was left behind. It returns what it did.
//
// What runs beside it differs per backend, not the workload: on Valkey a
// worker can promote delayed work and resolve flow edges itself
// (cfg.PromoteInline, cfg.ResolveInline) for a run without the host's
// scanners; on Postgres the host's pg_delayed_promoter and
// pg_dependency_reconciler do, and the SDK ignores those options.
func runWorkload(ctx context.Context, b backend.Provider, cfg workloadConfig, out io.Writer) (workloadSummary, error) {
	cfg.fill()
	if err := cfg.validate(); err != nil {
		return workloadSummary{}, err
	}
	start := time.Now()
	client, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: b, Creator: "fabric-demo", Logger: cfg.Logger})
	if err != nil {
		return workloadSummary{}, err
	}
	wl := &workload{cfg: cfg, c: client, out: out, transient: transientLog{isTransient: b.Driver().IsTransient}, pending: map[model.ExecutionID]struct{}{},
		submitted: map[string]int64{}, terminal: map[string]int64{}, signals: make(chan *sdk.Suspension, 1024)}

	// Workers live until the drain is over, not until ctx ends.
	life, kill := context.WithCancel(context.WithoutCancel(ctx))
	defer kill()
	runCtx, stopRun := context.WithCancel(life)
	defer stopRun()
	var runs sync.WaitGroup
	for i := 0; i < cfg.Workers; i++ {
		w, err := sdk.Connect(life, b, sdk.WorkerConfig{WorkerID: "fabric-demo", Lanes: cfg.Lanes,
			Concurrency: cfg.Concurrency, PromoteDelayed: cfg.PromoteInline, ResolveDependencies: cfg.ResolveInline,
			ShutdownTimeout: 5 * time.Second, Logger: cfg.Logger})
		if err != nil {
			return wl.summary(start), err
		}
		wl.workers = append(wl.workers, w)
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := w.Run(runCtx, wl.handle); err != nil {
				cfg.Logger.Warn("worker stopped", "error", err)
			}
		}()
	}
	defer func() {
		for _, w := range wl.workers {
			_ = w.Close(context.WithoutCancel(ctx))
		}
	}()
	var sig sync.WaitGroup
	sig.Add(1)
	go func() { defer sig.Done(); wl.deliverSignals(life) }()

	submitCtx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		submitCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	var subErr error
	subDone := make(chan struct{})
	go func() { defer close(subDone); subErr = wl.submit(submitCtx) }()

	report := time.NewTicker(cfg.Report)
	defer report.Stop()
	var last sdk.Stats
	lastExecs, lastAt := int64(0), time.Now()
	tick := func(phase string) {
		wl.sweep(life)
		st := wl.stats()
		now := time.Now()
		dt := now.Sub(lastAt).Seconds()
		wl.mu.Lock()
		pend := len(wl.pending)
		wl.mu.Unlock()
		ex := wl.execs.Load()
		fmt.Fprintln(out, rateLine(phase, now.Sub(start), float64(ex-lastExecs)/dt, float64(st.Completed-last.Completed)/dt,
			[]int64{ex, st.Completed, st.Retried, st.Suspended, st.Resumed, st.Delayed, st.InFlight, int64(pend)}))
		last, lastExecs, lastAt = st, ex, now
	}
running:
	for {
		select {
		case <-subDone:
			break running
		case <-report.C:
			tick("run  ")
		}
	}
	if subErr != nil && !errors.Is(subErr, context.Canceled) && !errors.Is(subErr, context.DeadlineExceeded) {
		cfg.Logger.Warn("submitting stopped", "error", subErr)
	}
	fmt.Fprintf(out, "demo: stopped submitting; draining %d executions (up to %s)\n", wl.pendingCount(), cfg.DrainTimeout)
	deadline := time.NewTimer(cfg.DrainTimeout)
	defer deadline.Stop()
drain:
	for wl.pendingCount() > 0 {
		select {
		case <-deadline.C:
			break drain
		case <-report.C:
			tick("drain")
		}
	}
	stopRun() // graceful: in-flight handlers finish, the rest is handed back
	runs.Wait()
	kill()
	sig.Wait()
	wl.sweep(context.WithoutCancel(ctx))
	sum := wl.summary(start)
	if cfg.Audit != nil {
		rep, err := cfg.Audit(context.WithoutCancel(ctx))
		if err != nil {
			return sum, fmt.Errorf("demo: audit: %w", err)
		}
		sum.Audit = rep
		fmt.Fprintf(out, "demo: audit: %s\n", rep.Summary())
		for _, v := range rep.Violations[:min(5, len(rep.Violations))] {
			fmt.Fprintf(out, "demo: left behind: %s\n", v)
			cfg.Logger.Warn("demo: execution left behind", "execution", v.String())
		}
		if !rep.OK() {
			return sum, fmt.Errorf("demo: %d executions left behind (neither ended nor waiting for a stated reason)", len(rep.Violations)+rep.More)
		}
	}
	if sum.Unfinished > 0 {
		wl.describePending(context.WithoutCancel(ctx), 5)
		return sum, wl.judgeUnfinished(context.WithoutCancel(ctx), sum.Unfinished)
	}
	return sum, nil
}

// judgeUnfinished says what the n executions still not terminal after the
// drain are, by kind of wait (audit.Report.Waiting: delayed until a time
// to come, due but not yet promoted, eligible but unclaimed once the
// workers stopped, blocked on a flow edge, suspended, leased), and whether that is a failure: it is not when
// every one states a live reason to wait — a later run's workers on the
// lanes finish them (the drain ended first: a slow machine, a scanner
// behind) — and it is when one does not (an execution left behind), or
// when there is no audit to tell.
func (wl *workload) judgeUnfinished(ctx context.Context, n int) error {
	if wl.cfg.AuditOnly == nil {
		return fmt.Errorf("demo: %d executions not terminal after the %s drain (their states above)", n, wl.cfg.DrainTimeout)
	}
	wl.mu.Lock()
	ids := make(map[string]bool, len(wl.pending))
	for id := range wl.pending {
		ids[string(id)] = true
	}
	wl.mu.Unlock()
	rep, err := wl.cfg.AuditOnly(ctx, ids)
	if err != nil {
		return fmt.Errorf("demo: %d executions not terminal after the %s drain; checking them: %w", n, wl.cfg.DrainTimeout, err)
	}
	waits := "none (they ended since)"
	if len(rep.Waiting) > 0 {
		kinds := make([]string, 0, len(rep.Waiting))
		for k, c := range rep.Waiting {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, c))
		}
		sort.Strings(kinds)
		waits = strings.Join(kinds, ", ")
	}
	if !rep.OK() {
		for _, v := range rep.Violations[:min(5, len(rep.Violations))] {
			fmt.Fprintf(wl.out, "demo: left behind: %s\n", v)
		}
		return fmt.Errorf("demo: %d executions not terminal after the %s drain (waiting: %s); %d left behind (neither ended nor waiting for a stated reason)",
			n, wl.cfg.DrainTimeout, waits, len(rep.Violations)+rep.More)
	}
	why := ""
	if rep.Waiting["awaiting promotion"] > 0 {
		why = "; awaiting promotion: their delay has ended and the delayed promoter has yet to reach them, being behind"
	}
	msg := fmt.Sprintf("demo: %d executions not terminal after the %s drain, each waiting for a stated reason (%s%s): "+
		"nothing is left behind; a later run's workers on these lanes finish them (a longer --drain-timeout waits for them)",
		n, wl.cfg.DrainTimeout, waits, why)
	fmt.Fprintln(wl.out, msg)
	wl.cfg.Logger.Warn(msg)
	return nil
}

func (wl *workload) pendingCount() int {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	return len(wl.pending)
}

func (wl *workload) stats() sdk.Stats {
	var s sdk.Stats
	for _, w := range wl.workers {
		x := w.Stats()
		s.Claimed += x.Claimed
		s.Reclaimed += x.Reclaimed
		s.Resumed += x.Resumed
		s.Completed += x.Completed
		s.Failed += x.Failed
		s.Retried += x.Retried
		s.Delayed += x.Delayed
		s.Suspended += x.Suspended
		s.HandedBack += x.HandedBack
		s.Lost += x.Lost
		s.InFlight += x.InFlight
	}
	return s
}

func (wl *workload) summary(start time.Time) workloadSummary {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	s := workloadSummary{Submitted: map[string]int64{}, Terminal: map[string]int64{}, Executions: wl.execs.Load(),
		Unfinished: len(wl.pending), Workers: wl.stats(), Elapsed: time.Since(start),
		Retried: wl.transient.retried.Load(), Dropped: wl.transient.dropped.Load()}
	for k, v := range wl.submitted {
		s.Submitted[k] = v
	}
	for k, v := range wl.terminal {
		s.Terminal[k] = v
	}
	return s
}

// sweepFanOut bounds the state reads one sweep has in flight.
const sweepFanOut = 4

// sweep reads the state of every pending execution (sdk.Client.State,
// sweepFanOut at a time: Valkey's client pipelines them, Postgres's pool
// runs them side by side) and retires the terminal ones, counting them by
// public state. An execution whose read fails stays pending for the next
// sweep.
func (wl *workload) sweep(ctx context.Context) {
	wl.mu.Lock()
	ids := make([]model.ExecutionID, 0, len(wl.pending))
	for id := range wl.pending {
		ids = append(ids, id)
	}
	wl.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	states := make([]string, len(ids)) // "" : not terminal, or not read
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(sweepFanOut, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(ids); i = int(next.Add(1) - 1) {
				if st, err := wl.c.State(ctx, ids[i]); err == nil && st.LifecyclePhase == model.PhaseTerminal {
					states[i] = st.PublicState
				}
			}
		}()
	}
	wg.Wait()
	wl.mu.Lock()
	defer wl.mu.Unlock()
	for i, st := range states {
		if st != "" {
			wl.terminal[st]++
			delete(wl.pending, ids[i])
		}
	}
}

// submitters bounds the items being submitted at once: an item whose
// creation takes a while (a flow is five round trips, and on Postgres
// adding a member with dependencies is a transaction of its own) does
// not hold back the rate.
const submitters = 8

// submit creates work items at the configured rate until ctx ends, up to
// submitters at once; it returns once every item begun is submitted (or
// dropped), with ctx's error or the first error that is not transient.
func (wl *workload) submit(ctx context.Context) error {
	if wl.cfg.Rate == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	interval := time.Duration(float64(time.Second) / wl.cfg.Rate)
	t := time.NewTicker(max(interval, time.Millisecond))
	defer t.Stop()
	perTick := max(1, int(wl.cfg.Rate*float64(max(interval, time.Millisecond))/float64(time.Second)))
	slots := make(chan struct{}, submitters)
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	failed := make(chan error, submitters)
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-t.C:
		}
		for i := 0; i < perTick && ctx.Err() == nil; i++ {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			case err := <-failed:
				return err
			}
			inFlight.Add(1)
			go func(n int) {
				defer inFlight.Done()
				defer func() { <-slots }()
				// An item is submitted whole or not at all: a flow cut
				// in half by Ctrl-C would leave members waiting forever.
				if err := wl.submitOne(context.WithoutCancel(ctx), n); err != nil {
					var te *transientError
					if !errors.As(err, &te) {
						// Said at once: after Ctrl-C nobody reads failed.
						wl.report("demo: " + err.Error())
						select {
						case failed <- err:
						default: // one error is enough
						}
						return
					}
					wl.report(err.Error() + "; item dropped")
				}
			}(n)
			n++
		}
	}
}

func (wl *workload) pick() string {
	total := 0
	for _, w := range wl.cfg.Mix {
		total += w
	}
	r := rand.IntN(total)
	for _, k := range workKinds {
		if r -= wl.cfg.Mix[k]; r < 0 {
			return k
		}
	}
	return kindImmediate
}

func (wl *workload) track(kind string, ids ...model.ExecutionID) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	wl.submitted[kind]++
	for _, id := range ids {
		wl.pending[id] = struct{}{}
	}
	wl.execs.Add(int64(len(ids)))
}

func (wl *workload) submitOne(ctx context.Context, n int) error {
	lane := wl.cfg.Lanes[n%len(wl.cfg.Lanes)]
	kind := wl.pick()
	spec := sdk.ExecutionSpec{Lane: lane, Kind: kind, Payload: []byte(fmt.Sprintf(`{"n":%d}`, n)), Priority: rand.IntN(10)}
	switch kind {
	case kindDelayed:
		spec.Delay = time.Duration(100+rand.IntN(900)) * time.Millisecond
	case kindRetry:
		spec.Policy = &sdk.Policy{MaxRetries: 3, Backoff: sdk.ExponentialBackoff(50*time.Millisecond, time.Second, 2)}
	case kindDAG:
		return wl.submitDAG(ctx, lane, n)
	}
	var id model.ExecutionID
	err := wl.transient.retry(ctx, "create execution", wl.report, func() (err error) {
		id, err = wl.c.CreateExecution(ctx, spec)
		return err
	})
	if err != nil {
		return err
	}
	wl.track(kind, id)
	return nil
}

// submitDAG creates a diamond flow: root → (left, right) → join.
func (wl *workload) submitDAG(ctx context.Context, lane string, n int) error {
	var f *sdk.Flow
	err := wl.transient.retry(ctx, "create flow", wl.report, func() (err error) {
		f, err = wl.c.CreateFlow(ctx, "demo.diamond")
		return err
	})
	if err != nil {
		return err
	}
	spec := func(step string) sdk.ExecutionSpec {
		return sdk.ExecutionSpec{Lane: lane, Kind: kindDAG, Payload: []byte(fmt.Sprintf(`{"n":%d,"step":%q}`, n, step))}
	}
	var ids []model.ExecutionID
	defer func() { wl.track(kindDAG, ids...) }()
	// A member whose add failed after its creation exists (cancelled by
	// the SDK): it is counted too, so the audit finds nothing unknown.
	step := func(name string, deps ...model.ExecutionID) (model.ExecutionID, error) {
		id, err := wl.add(ctx, f, spec(name), deps...)
		if id != "" {
			ids = append(ids, id)
		}
		return id, err
	}
	return addDiamond(step)
}

// addDiamond adds a diamond's members with add, each after its parents:
// root, then left and right after root, then join after both.
func addDiamond(add func(name string, after ...model.ExecutionID) (model.ExecutionID, error)) error {
	root, err := add("root")
	if err != nil {
		return err
	}
	left, err := add("left", root)
	if err != nil {
		return err
	}
	right, err := add("right", root)
	if err != nil {
		return err
	}
	_, err = add("join", left, right)
	return err
}

// add adds a member to flow f, waiting out transient backend errors.
func (wl *workload) add(ctx context.Context, f *sdk.Flow, spec sdk.ExecutionSpec, deps ...model.ExecutionID) (model.ExecutionID, error) {
	var id model.ExecutionID
	err := wl.transient.retry(ctx, "add flow member", wl.report, func() (err error) {
		id, err = f.Add(ctx, spec, deps...)
		return err
	})
	return id, err
}

// report tells the output and the log of a transient error.
func (wl *workload) report(msg string) {
	fmt.Fprintln(wl.out, msg)
	wl.cfg.Logger.Warn(msg)
}

// handle is the demo's handler: a little simulated work, then the
// behaviour of the item's kind.
func (wl *workload) handle(ctx context.Context, j *sdk.Job) error {
	if d := time.Duration(rand.IntN(2000)) * time.Microsecond; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	switch j.Kind {
	case kindDelayed:
		if _, again := wl.parked.LoadOrStore(j.ID, true); !again {
			return sdk.DelayFor(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		}
		wl.parked.Delete(j.ID)
	case kindRetry:
		if j.Attempt < 2 {
			return fmt.Errorf("simulated transient failure on attempt %d", j.Attempt)
		}
	case kindSuspend:
		if j.AttemptType == "resumed" {
			break
		}
		s, err := j.Suspend(ctx, sdk.SuspendSpec{Signals: []string{"approve"}, Timeout: 5 * time.Minute})
		if err != nil {
			return err
		}
		if !s.AlreadySatisfied {
			wl.signals <- s
		}
		return nil
	}
	j.SetResult([]byte(`{"ok":true}`))
	return nil
}

// deliverSignals approves each suspended item after a short pause, like
// an external system would, until ctx ends.
func (wl *workload) deliverSignals(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-wl.signals:
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTimer(time.Duration(50+rand.IntN(200)) * time.Millisecond)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if err := wl.transient.retry(ctx, "deliver signal", wl.report, func() error {
					_, err := wl.c.DeliverSignal(ctx, s.ExecutionID, sdk.Signal{WaitpointID: s.WaitpointID, Token: s.Token,
						Name: "approve", Payload: []byte(`{"approved":true}`)})
					return err
				}); err != nil && ctx.Err() == nil {
					wl.cfg.Logger.Warn("deliver signal failed", "execution_id", s.ExecutionID, "error", err)
				}
			}()
		}
	}
}

// describePending prints the state of up to n unfinished executions.
func (wl *workload) describePending(ctx context.Context, n int) {
	wl.mu.Lock()
	var ids []model.ExecutionID
	for id := range wl.pending {
		if len(ids) == n {
			break
		}
		ids = append(ids, id)
	}
	wl.mu.Unlock()
	for _, id := range ids {
		st, err := wl.c.State(ctx, id)
		if err != nil {
			fmt.Fprintf(wl.out, "demo: unfinished %s: %v\n", id, err)
			wl.cfg.Logger.Warn("demo: unfinished execution", "id", id, "error", err)
			continue
		}
		fmt.Fprintf(wl.out, "demo: unfinished %s kind=%s state=%s/%s/%s/%s/%s attempts=%d detail=%q\n", id, st.Kind,
			st.LifecyclePhase, st.OwnershipState, st.EligibilityState, st.BlockingReason, st.AttemptState,
			st.AttemptCount, st.Fields["blocking_detail"])
		// The output may be a closed pipe: the log says it too.
		wl.cfg.Logger.Warn("demo: unfinished execution", "id", id, "kind", st.Kind, "phase", st.LifecyclePhase,
			"ownership", st.OwnershipState, "eligibility", st.EligibilityState, "blocking", st.BlockingReason,
			"attempt_state", st.AttemptState, "attempts", st.AttemptCount, "detail", st.Fields["blocking_detail"],
			"flow", st.Fields["flow_id"])
	}
}
