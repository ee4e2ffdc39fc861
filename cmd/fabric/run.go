package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/statusview"
)

func init() {
	register(&command{
		name: "run",
		summary: "Run the host: its plugins over a private server (or --valkey-url) with the demo workload and a live status view, " +
			"until Ctrl-C or --duration, then drain and print a summary.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			b := addBackendFlags(fs)
			fs.DurationVar(&b.wait, "backend-wait", 30*time.Second, "at start, how long to wait (with backoff) for a backend that is not reachable yet; 0 fails at once")
			wf := addWorkloadFlags(fs)
			o := &runFlags{
				config:     fs.String("config", "", "TOML config file: the flags' values by name (valkey_url, plugin_dir, refresh, [demo] rate, ...), [plugins.NAME] and grants, as README.md shows; flags given on the command line win"),
				demo:       fs.Bool("demo", true, "run the demo workload beside the host"),
				pluginDir:  fs.String("plugins", filepath.Join("bin", "plugins"), "plugin directory the host loads and watches (\"\": run without plugins)"),
				cacheDir:   fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory (\"\": in memory)"),
				statusFile: fs.String("status-file", "", "write the host's plugin status here for `fabric plugins list --status`"),
				adminAddr:  fs.String("admin-addr", admin.ServerAddrDefault, "admin HTTP address (/metrics, /healthz, /readyz, /plugins, /status); \"\" disables it"),
				tokenFile:  fs.String("admin-token-file", "", "file whose first line is the admin token the console's write actions require (default $FABRIC_ADMIN_TOKEN; none: writes refused)"),
				view:       fs.String("view", "auto", "status view: auto (live on a terminal, lines otherwise), tty, lines or off"),
				refresh:    fs.Duration("refresh", 0, "status view refresh interval (default 1s live, 2s lines)"),
				census:     fs.Duration("census-interval", admin.SamplerIntervalDefault, "keyspace census interval (executions by state, lag)"),
				gcPercent:  fs.Int("gc-percent", gcPercentDefault, "the Go GC's target (GOGC) for this process, unless the GOGC environment variable is set: the plugins' compiled modules are a large live heap that does not change, which the Go default (100) lets double before a collection"),
				leases:     fs.Bool("partition-leases", true, "share the partitions with the deployment's other hosts by lease (false: scan every partition, as FlowFabric's engines do)"),
				hostID:     fs.String("host-id", "", "this host's id in partition leases (default <hostname>-<pid>-<random>)"),
				leaseTTL:   fs.Duration("lease-ttl", partlease.TTLDefault, "partition lease TTL: a dead host's partitions are taken over this long after its last renewal"),
				idle:       fs.Duration("idle-release", host.HostIdleReleaseDefault, "a plugin's instance idle this long is released with its resident machine code, and made afresh at its next call (dispatchers and timer-driven scanners stay warm; [plugins.NAME] idle_release overrides); negative: never"),
				trust:      addTrustFlags(fs), // policy.go
			}
			o.adminTLSCert = fs.String("admin-tls-cert", "", "PEM certificate: the admin server serves HTTPS (with --admin-tls-key)")
			o.adminTLSKey = fs.String("admin-tls-key", "", "PEM key of --admin-tls-cert")
			o.adminHosts = fs.String("admin-hosts", "", "comma-separated names the admin server is reached by besides localhost, 127.0.0.1 and [::1] "+
				"(and any IP address on a bind that is not loopback); a request for another Host is refused, so a DNS-rebinding page cannot read it")
			fs.Var(&o.partitions, "partitions", "partition counts of a new deployment, flow=N,budget=N,quota=N (default 256/32/32)")
			pgf := addRunPostgresFlags(fs) // run_postgres.go
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if *o.config != "" {
					pcs, err := loadRunFile(fs, *o.config)
					if err != nil {
						return err
					}
					o.pluginCfg = pcs
					if err := o.trust.readFile(fs, *o.config); err != nil {
						return err
					}
				}
				open, err := pgf.opener(fs)
				if err != nil {
					return err
				}
				return runHost(ctx, env, open, b, wf, o)
			}
		},
	})
}

// runFlags are `fabric run`'s own flags.
type runFlags struct {
	config, pluginDir, cacheDir, statusFile, adminAddr, view *string
	tokenFile                                                *string
	demo                                                     *bool
	refresh, census, idle                                    *time.Duration
	gcPercent                                                *int
	// leases, hostID and leaseTTL configure partition leases.
	leases     *bool
	hostID     *string
	leaseTTL   *time.Duration
	partitions partitionsFlag
	// pluginCfg is the config file's per-plugin configuration.
	pluginCfg map[string]host.PluginConfig
	// trust is the operator's grants and trusted keys (policy.go).
	trust *trustFlags
	// adminTLSCert and adminTLSKey make the admin server serve HTTPS.
	adminTLSCert, adminTLSKey *string
	// adminHosts are the names the admin server answers to besides the
	// loopback ones (comma-separated).
	adminHosts *string
}

// hosts parses --admin-hosts: names (or IP addresses), a port allowed.
func (o *runFlags) hosts() ([]string, error) {
	if o.adminHosts == nil || strings.TrimSpace(*o.adminHosts) == "" {
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(*o.adminHosts, ",") {
		n = strings.TrimSpace(n)
		if n == "" || strings.ContainsFunc(n, func(r rune) bool {
			return !(r == '.' || r == '-' || r == ':' || r == '[' || r == ']' || r == '_' ||
				(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) {
			return nil, fmt.Errorf("%w: --admin-hosts %q: want comma-separated host names", errUsage, *o.adminHosts)
		}
		out = append(out, n)
	}
	return out, nil
}

// adminTLS loads the admin server's certificate (nil: plain HTTP).
func (o *runFlags) adminTLS() (*tls.Config, error) {
	if o.adminTLSCert == nil || (*o.adminTLSCert == "" && *o.adminTLSKey == "") {
		return nil, nil
	}
	if *o.adminTLSCert == "" || *o.adminTLSKey == "" {
		return nil, fmt.Errorf("%w: --admin-tls-cert and --admin-tls-key go together", errUsage)
	}
	cert, err := tls.LoadX509KeyPair(*o.adminTLSCert, *o.adminTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--admin-tls-cert: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// errBrokenPipe ends a run whose output reader went away (`| head`).
var errBrokenPipe = errors.New("output closed (broken pipe)")

// errInterruptKey ends a run whose live view read Ctrl-C or q.
var errInterruptKey = errors.New("interrupted from the keyboard")

// runHost is `fabric run` on either backend: open it (open: connect or
// start its server child, ready the deployment), start the host on it,
// then the census sampler, admin server and status view
// (runSession.observe) and the demo workload; on Ctrl-C, SIGTERM or a
// closed output, drain on a context they do not cancel and stop
// everything in reverse, the server child last.
func runHost(ctx context.Context, env *cliEnv, open runBackendOpener, b *backendFlags, wf *workloadFlags, o *runFlags) (err error) {
	cfg, err := wf.config()
	if err != nil {
		return err
	}
	if b.waitTLS, err = o.adminTLS(); err != nil {
		return err
	}
	if b.waitHosts, err = o.hosts(); err != nil {
		return err
	}
	o.applyGCPercent()
	rs, ctx, err := startRunSession(ctx, env, b, *o.view)
	if err != nil {
		return err
	}
	defer func() { err = rs.end(err) }()
	out := rs.out
	b.waitAdmin = *o.adminAddr
	be, err := open(ctx, env, b, wf, o, cfg, out)
	if err != nil {
		return err
	}
	defer be.close()

	metrics := admin.NewMetrics()
	hc := be.host
	hc.Logger, hc.IdleRelease = be.logger, *o.idle
	h, err := startHost(ctx, out, hc, hostOptions{dir: *o.pluginDir, cacheDir: *o.cacheDir, statusFile: *o.statusFile,
		plugins: o.pluginCfg, defaults: be.pluginDefaults, intervals: be.pluginIntervals, observer: metrics, trust: o.trust,
		leases: partlease.Config{Disabled: !*o.leases, HostID: *o.hostID, TTL: *o.leaseTTL}})
	if err != nil {
		return err
	}
	var src admin.PluginSource
	if h != nil {
		src = h
		defer stopHost(ctx, out, h)
	}
	addr := *o.adminAddr
	if b.adminBound != "" {
		addr = b.adminBound // the address /readyz answered on while the backend was awaited
	}
	obs, err := rs.observe(ctx, env, o, observeConfig{
		title: fmt.Sprintf("fabric %s · %s", Version, be.title), where: be.where,
		src: src, metrics: metrics, logger: be.logger, addr: addr, tls: b.waitTLS, hosts: b.waitHosts,
		sampler: be.sampler, server: be.server})
	if err != nil {
		return err
	}
	defer obs.stop()

	if !*o.demo {
		return rs.idle(ctx, obs)
	}
	if rs.mode != "tty" {
		fmt.Fprintln(out, be.demoNote)
	}
	cfg.Logger = be.logger
	if be.private {
		cfg.Audit = be.audit
	}
	cfg.AuditOnly = be.auditOnly
	if be.prepareDemo != nil {
		be.prepareDemo(h, &cfg, out)
	}
	sum, werr := runWorkload(ctx, be.provider, cfg, obs.wout)
	obs.stopView()
	if context.Cause(ctx) == errBrokenPipe {
		be.logger.Info("output closed; stopped")
	}
	fmt.Fprintf(out, "demo: %s\n", sum)
	counts, err := be.stateCounts(context.WithoutCancel(ctx))
	if err != nil {
		return errors.Join(werr, err)
	}
	fmt.Fprintf(out, "executions by state: %s\n", counts)
	return werr
}

// runSession is what a run does around its backend, the same on Valkey
// and Postgres: the view mode, an output that ends the run when its
// reader goes away, the live view's keyboard (Ctrl-C, q) and the tail its
// log lines go to.
type runSession struct {
	mode string
	// out is the run's output; a failed write (a closed pipe) cancels
	// the run's context with errBrokenPipe.
	out io.Writer
	// events is the live view's log tail (nil off a terminal).
	events *statusview.Tail
	// asked is the caller's context: ended when the operator asked
	// (Ctrl-C, SIGTERM, --duration's end is not one).
	asked   context.Context
	ctx     context.Context
	cancel  context.CancelCauseFunc
	restore func()
}

// startRunSession resolves --view, wraps the output and, on a terminal,
// sends b's logs to the view and reads the keyboard. The returned context
// ends on Ctrl-C, SIGTERM, a closed output or a key; end releases it all.
func startRunSession(ctx context.Context, env *cliEnv, b *backendFlags, view string) (*runSession, context.Context, error) {
	mode, err := viewMode(view, env.stdout)
	if err != nil {
		return nil, nil, err
	}
	rs := &runSession{mode: mode, asked: ctx, restore: func() {}}
	rs.ctx, rs.cancel = context.WithCancelCause(ctx)
	// A closed stdout must stop the run, not kill the process: Go exits on
	// SIGPIPE from stdout unless it is notified, and a killed run would
	// leave leases behind. Once notified, a broken pipe on any descriptor
	// is only an EPIPE from write: stdout's reaches out (breakWriter) and
	// ends the run; an admin client that hung up is that connection's
	// error alone, so the signal itself is never acted on.
	rs.out = &breakWriter{w: env.stdout, broken: func() { rs.cancel(errBrokenPipe) }}
	if f, ok := env.stdout.(*os.File); ok && f == os.Stdout {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}
	if mode == "tty" {
		rs.events = statusview.NewTail(6)
		b.logOut = rs.events
		if f, ok := env.stdout.(*os.File); ok && f == os.Stdout {
			rs.restore = catchInterruptKey(os.Stdin, func() { rs.cancel(errInterruptKey) })
		}
	}
	return rs, rs.ctx, nil
}

// end releases the keyboard and the context and returns err, or nil when
// err is only the cancellation of a run stopped during start-up because
// its reader went away (`| head`) or the operator asked (Ctrl-C,
// SIGTERM): it did what it was told.
func (rs *runSession) end(err error) error {
	rs.restore()
	rs.cancel(nil)
	if err != nil && errors.Is(err, context.Canceled) &&
		(context.Cause(rs.ctx) == errBrokenPipe || context.Cause(rs.ctx) == errInterruptKey || rs.asked.Err() != nil) {
		return nil
	}
	return err
}

// idle is a run without the demo: the host runs until the run ends.
func (rs *runSession) idle(ctx context.Context, obs *runObservers) error {
	if rs.mode == "off" {
		fmt.Fprintln(rs.out, "host running; Ctrl-C stops it")
	}
	<-ctx.Done()
	obs.stopView()
	return nil
}

// observeConfig is what a backend gives runSession.observe.
type observeConfig struct {
	// title heads the live view; where names the backend in /status.
	title, where string
	src          admin.PluginSource
	metrics      *admin.Metrics
	logger       *slog.Logger
	// addr is the admin address (--admin-addr, or where a wait server
	// was bound); tls serves it over HTTPS.
	addr string
	tls  *tls.Config
	// hosts are the names it answers to besides the loopback ones.
	hosts []string
	// sampler and server carry the backend: SamplerConfig.Backend or
	// Take, ServerConfig.Backend or Probe and Console. observe fills the
	// rest.
	sampler admin.SamplerConfig
	server  admin.ServerConfig
}

// runObservers are a run's census sampler, admin server and status view.
type runObservers struct {
	// wout receives the workload's rate lines: the live view's tail on a
	// terminal, the output otherwise.
	wout io.Writer
	// stopView stops the status view (idempotent); stop stops it all.
	stopView func()
	stops    []func()
}

func (obs *runObservers) stop() {
	obs.stopView()
	for i := len(obs.stops) - 1; i >= 0; i-- {
		obs.stops[i]()
	}
	obs.stops = nil
}

// observe starts the census sampler, the admin server (--admin-addr) and
// the status view (--view) of a run on either backend. Like the host,
// they serve the drain too: they run on a context Ctrl-C does not cancel
// and stop with obs.stop.
func (rs *runSession) observe(ctx context.Context, env *cliEnv, o *runFlags, oc observeConfig) (obs *runObservers, err error) {
	obs = &runObservers{wout: rs.out, stopView: func() {}}
	defer func() {
		if err != nil {
			obs.stop()
		}
	}()
	out := rs.out
	life := context.WithoutCancel(ctx)
	sc := oc.sampler
	sc.Interval, sc.Logger = *o.census, oc.logger
	sampler := admin.NewSampler(sc)
	if err := sampler.Start(life); err != nil {
		return obs, err
	}
	obs.stops = append(obs.stops, sampler.Stop)
	oc.metrics.Attach(oc.src, sampler)
	adminURL := ""
	if oc.addr != "" {
		token, err := readAdminToken(*o.tokenFile)
		if err != nil {
			return obs, err
		}
		svc := oc.server
		svc.Addr, svc.Host, svc.BackendName, svc.Sampler, svc.Metrics = oc.addr, oc.src, oc.where, sampler, oc.metrics
		svc.Logger, svc.TLS, svc.AdminToken, svc.Hosts = oc.logger, oc.tls, token, oc.hosts
		srv := admin.NewServer(svc)
		if err := srv.Start(life); err != nil {
			// Another run holds the port: this one still runs, unobserved.
			fmt.Fprintf(out, "admin server not started: %v\n", err)
		} else {
			obs.stops = append(obs.stops, srv.Stop)
			adminURL = srv.URL()
			fmt.Fprintf(out, "admin: %s/metrics /healthz /readyz /plugins /status /api\n", adminURL)
			writes := "writes need the admin token"
			if token == "" {
				writes = "read-only: no admin token (--admin-token-file or " + adminTokenEnv + ")"
			}
			fmt.Fprintf(out, "console: %s/ui/ (%s)\n", adminURL, writes)
		}
	}
	var wtail *statusview.Tail
	if rs.mode == "tty" {
		wtail = statusview.NewTail(1)
		obs.wout = wtail
	}
	if rs.mode != "off" {
		sub := "Ctrl-C: stop submitting, drain and exit"
		if adminURL != "" {
			sub = "console " + adminURL + "/ui/ · " + sub
		}
		vc := statusview.Config{Out: out, TTY: rs.mode == "tty", Interval: *o.refresh, Title: oc.title, Subtitle: sub,
			Report: func() admin.Report { return admin.BuildReport(time.Now(), oc.where, oc.src, sampler) }}
		if rs.mode == "tty" {
			vc.Workload, vc.Events = wtail.Last, rs.events.Lines
			vc.Width = func() int { return termWidth(env.stdout) }
			vc.Height = func() int { _, rows := termSize(env.stdout); return rows }
		}
		v := statusview.New(vc)
		vctx, vcancel := context.WithCancel(life)
		done := make(chan struct{})
		go func() { defer close(done); v.Run(vctx) }()
		obs.stopView = func() { vcancel(); <-done; obs.stopView = func() {} }
	}
	return obs, nil
}

// viewMode resolves --view: "auto" is "tty" when out is a terminal.
func viewMode(v string, out io.Writer) (string, error) {
	switch v {
	case "tty", "lines", "off":
		return v, nil
	case "auto":
		if isTerminal(out) {
			return "tty", nil
		}
		return "lines", nil
	}
	return "", fmt.Errorf("%w: --view %q: want auto, tty, lines or off", errUsage, v)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// termSize is the terminal's column and row count (0, 0 when w is not a
// terminal).
func termSize(w io.Writer) (cols, rows int) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, 0
	}
	cols, rows, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0, 0
	}
	return cols, rows
}

// termWidth is the terminal's column count (0 when unknown).
func termWidth(w io.Writer) int {
	cols, _ := termSize(w)
	return cols
}

// breakWriter forwards writes until the first failure (a closed pipe),
// then calls broken once and discards the rest, so that a run whose
// reader went away drains and stops cleanly.
type breakWriter struct {
	mu     sync.Mutex
	w      io.Writer
	failed bool
	broken func()
}

func (b *breakWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed {
		return len(p), nil
	}
	if _, err := b.w.Write(p); err != nil {
		b.failed = true
		go b.broken()
	}
	return len(p), nil
}

// hostOptions configure startHost.
type hostOptions struct {
	dir, cacheDir, statusFile string
	// plugins is per-plugin configuration from the config file.
	plugins map[string]host.PluginConfig
	// defaults are config entries the run sets for its backend (on
	// Postgres, pg_dependency_reconciler's stale_ms 0: the host is the
	// push dispatcher); the config file's entries win, and a plugin the
	// directory lacks is no error.
	defaults map[string]map[string]string
	// intervals are sweep intervals the run sets for its backend (on
	// Postgres with completion wake-ups, pg_dependency_reconciler's
	// postgres.DependencySafetyInterval); the config file's interval wins.
	intervals map[string]time.Duration
	observer  host.Observer
	// leases configures partition leases.
	leases partlease.Config
	// trust sets the host's Policy and trusted keys (policy.go).
	trust *trustFlags
}

// startHost starts the plugin host on dir and waits for its first load;
// base carries the backend (Backend, Postgres, Partitions, Logger,
// Completions), o the rest. An empty dir, or the default dir when it does
// not exist, runs without a host (nil).
func startHost(ctx context.Context, out io.Writer, base host.Config, o hostOptions) (*host.Host, error) {
	dir, cacheDir, statusFile := o.dir, o.cacheDir, o.statusFile
	if dir == "" {
		return nil, nil
	}
	if _, err := os.Stat(dir); err != nil {
		if dir == filepath.Join("bin", "plugins") && os.IsNotExist(err) {
			fmt.Fprintf(out, "no plugin directory %s (run `make plugins`); running without plugins\n", dir)
			return nil, nil
		}
		return nil, fmt.Errorf("--plugins: %w", err)
	}
	if cacheDir != "" {
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("--cache-dir: %w", err)
		}
	}
	hc := base
	hc.PluginDir, hc.CacheDir, hc.StatusFile, hc.Plugins, hc.Observer, hc.Leases = dir, cacheDir, statusFile, o.pluginConfigs(), o.observer, o.leases
	hc.VersionsFile = host.VersionsFileFor(cacheDir, dir)
	implicit, err := o.trust.apply(&hc)
	if err != nil {
		return nil, err
	}
	if implicit != "" && hc.Logger != nil {
		hc.Logger.Info("trusting the plugin signing key beside the plugin directory (no --trusted-keys given): the stock grants go to the files it signed",
			"key", implicit, "plugin_dir", dir)
	}
	h, err := host.New(hc)
	if err != nil {
		return nil, err
	}
	// The host outlives ctx: after Ctrl-C its scanners (the delayed
	// promoter among them) must keep running while the workload drains;
	// the caller stops it.
	if err := h.Start(context.WithoutCancel(ctx)); err != nil {
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
	if err := checkPluginSections(o.plugins, h.Plugins(), h.Files(), dir); err != nil {
		h.Stop()
		h.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	fmt.Fprintf(out, "host: %d plugins from %s\n", len(h.Plugins()), dir)
	if st, ok := h.Leases(); ok {
		fmt.Fprintf(out, "host id %s: partition leases (TTL %s), %d live hosts; owns flow %s · budget %s · quota %s\n",
			st.HostID, time.Duration(st.TTLMs)*time.Millisecond, len(st.Members), orNone(st.Owned["flow"]), orNone(st.Owned["budget"]), orNone(st.Owned["quota"]))
	}
	writePluginList(out, h.Plugins())
	return h, nil
}

// writePluginList prints the start-up list of plugins, one a line (name,
// version, state, reason), each column as wide as its widest cell so a
// long name (pg_edge_cancel_reconciler) does not push its row out of line.
func writePluginList(w io.Writer, ps []host.PluginStatus) {
	nameW, verW, stateW := 0, 0, 0
	for _, p := range ps {
		nameW, verW, stateW = max(nameW, len(p.Name)), max(verW, len(p.Version)), max(stateW, len(string(p.State)))
	}
	for _, p := range ps {
		line := fmt.Sprintf("  %-*s %-*s %-*s %s", nameW, p.Name, verW, p.Version, stateW, p.State, p.Reason)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

// hostPlugin reports whether h serves the named plugin.
func hostPlugin(h *host.Host, name string) (host.PluginStatus, bool) {
	if h == nil {
		return host.PluginStatus{}, false
	}
	return h.Plugin(name)
}

// stopHost prints what each plugin did and stops the host.
func stopHost(ctx context.Context, out io.Writer, h *host.Host) {
	printPlugins(out, h)
	h.Stop()
	h.Close(context.WithoutCancel(ctx))
}

// printPlugins prints what each plugin did during the run.
func printPlugins(out io.Writer, h *host.Host) {
	for _, p := range h.Plugins() {
		fmt.Fprintf(out, "plugin %s %s: %d sweeps, %d calls, %d faults, scanned %d, acted %d, errors %d\n",
			p.Name, p.Version, p.Cycles, p.Calls, p.Faults, p.Totals.Scanned, p.Totals.Acted, p.Totals.Errors)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// orNone is s, or "none" when empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// gcPercentDefault is `fabric run`'s GOGC: half the Go default, so the
// heap a collection lets grow is half the live heap (measured under the
// demo workload, default set: live heap ~207 MiB, nearly all of it the
// plugins' decoded modules).
const gcPercentDefault = 50

// applyGCPercent sets the process's GOGC from --gc-percent unless the
// GOGC environment variable is set (on both backends).
func (o *runFlags) applyGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*o.gcPercent)
	}
}

// pluginConfigs is the host's per-plugin configuration: the config
// file's, the backend's config entries (defaults) under its own, and the
// backend's sweep intervals (intervals) where it sets none.
func (o hostOptions) pluginConfigs() map[string]host.PluginConfig {
	plugins := map[string]host.PluginConfig{}
	for name, pc := range o.plugins {
		plugins[name] = pc
	}
	for name, entries := range o.defaults {
		pc := plugins[name]
		merged := map[string]string{}
		for k, v := range entries {
			merged[k] = v
		}
		for k, v := range pc.Config {
			merged[k] = v
		}
		pc.Config = merged
		plugins[name] = pc
	}
	for name, d := range o.intervals {
		if pc := plugins[name]; pc.Interval == 0 {
			pc.Interval = d
			plugins[name] = pc
		}
	}
	return plugins
}
