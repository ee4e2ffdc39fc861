package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/internal/redact"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// backendFlags are the flags every command that talks to Valkey shares.
type backendFlags struct {
	url string
	// conn is the connection's credentials and TLS.
	conn      *connFlags
	logLevel  string
	logFormat string
	// partitions, when set, are the deployment's partition counts (fabric
	// run's --partitions or config file); zero means FlowFabric's defaults.
	partitions model.PartitionConfig
	// wait is how long connect retries a backend that is not there yet
	// (refused, missing socket, loading); 0 fails at once.
	wait time.Duration
	// waitAdmin, when set, is the admin address a waitServer answers on
	// while connect waits; adminBound is the address it had (the admin
	// server proper takes it over, so port 0 keeps the port it picked).
	waitAdmin, adminBound string
	// waitTLS, when set, is the admin server's TLS (the waitServer's too).
	waitTLS *tls.Config
	// waitHosts are the names both answer to besides the loopback ones.
	waitHosts []string
	// logOut, when set, receives logs instead of stderr (the live view
	// keeps them off the screen it draws).
	logOut io.Writer
}

func addBackendFlags(fs *flag.FlagSet) *backendFlags {
	b := &backendFlags{conn: addConnFlags(fs)}
	fs.StringVar(&b.url, "valkey-url", "", "Valkey/Redis URL (redis://[user:password@]host:port, rediss:// for TLS, unix:///path) or a cluster (valkey+cluster://host:port,host:port,..., rediss+cluster:// for TLS). Empty: start a private server child for this run.")
	fs.StringVar(&b.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fs.StringVar(&b.logFormat, "log-format", "text", "log format: text or json (log/slog)")
	return b
}

// runBackend is all `fabric run` does differently per backend: which
// driver, its server child or URL, readying the deployment (the function
// library and bootstrap on Valkey, migrations on Postgres), the census
// and console over it, and what the demo workload needs beside the host.
// runHost is the rest — config, flags, session, host, admin server, view,
// signals, the demo workload (runWorkload, one for both: it runs on
// provider through the SDK), drain and shutdown — written once over it.
type runBackend struct {
	// where names the backend in the view's title and /status.
	where string
	// title ends the live view's title ("library 1.0.0", "schema 12").
	title  string
	logger *slog.Logger
	// private is a server child of this run: it holds only the demo's
	// executions, which the drain then audits.
	private bool
	// host carries the backend into host.Config: Backend or Postgres,
	// Partitions, Completions.
	host host.Config
	// pluginDefaults are config entries the backend sets for its plugins
	// (hostOptions.defaults).
	pluginDefaults map[string]map[string]string
	// pluginIntervals are sweep intervals the backend sets for its
	// plugins (hostOptions.intervals).
	pluginIntervals map[string]time.Duration
	// sampler and server are observeConfig's.
	sampler admin.SamplerConfig
	server  admin.ServerConfig
	// demoNote announces the demo off the live view.
	demoNote string
	// provider is the backend the demo workload runs on (the client the
	// SDK's constructors take).
	provider backend.Provider
	// prepareDemo, when set, fits the workload to what the host h runs
	// (a scanner the host lacks), saying on say what will not happen.
	prepareDemo func(h *host.Host, cfg *workloadConfig, say io.Writer)
	// audit checks the deployment after the demo's drain; runHost uses
	// it on a private server (workloadConfig.Audit).
	audit func(ctx context.Context) (*audit.Report, error)
	// auditOnly checks the demo's executions not terminal after its
	// drain (workloadConfig.AuditOnly), on any deployment.
	auditOnly func(ctx context.Context, ids map[string]bool) (*audit.Report, error)
	// stateCounts counts the deployment's executions by public_state.
	stateCounts func(ctx context.Context) (string, error)
	// close closes the client and stops the server child, if any.
	close func()
}

// runBackendOpener opens a backend for `fabric run`: it reaches it (or
// starts its server child) through dialWaiting, prints "fabric VERSION on
// WHERE" and what readying the deployment changed, and returns the
// wiring. On error it leaves nothing open.
type runBackendOpener func(ctx context.Context, env *cliEnv, b *backendFlags, wf *workloadFlags, o *runFlags, cfg workloadConfig, out io.Writer) (*runBackend, error)

// openValkeyRun is `fabric run`'s Valkey: the client (a private server
// child without --valkey-url), the function library and the bootstrap,
// the census over the keyspace and the console's writes, the host
// dispatching completions and holding partition leases, and the demo's
// FlowFabric workload.
func openValkeyRun(ctx context.Context, env *cliEnv, b *backendFlags, wf *workloadFlags, o *runFlags, cfg workloadConfig, out io.Writer) (_ *runBackend, err error) {
	b.partitions = o.partitions.PartitionConfig
	conn, err := b.connect(ctx, env)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	fmt.Fprintf(out, "fabric %s on %s\n", Version, conn.Where)
	// The demo's lanes join the lane registry only when the demo runs: a
	// host alone serves whatever lanes the deployment has.
	var lanes []string
	if *o.demo {
		lanes = cfg.Lanes
	}
	secret, err := wf.secretFor(ctx, conn, out)
	if err != nil {
		return nil, err
	}
	// Say what start-up changed on the server: an operator pointing
	// fabric at an existing deployment should know it installed code there.
	act, err := conn.Client.EnsureLibrary(ctx)
	if err != nil {
		return nil, err
	}
	if err := conn.Client.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: lanes, WaitpointHMACSecret: secret}); err != nil {
		return nil, err
	}
	lib := libraryVersion(ctx, conn.Client)
	fmt.Fprintf(out, "flowfabric library %s loaded (%s); partitions %+v\n", lib, libraryNote(act), conn.Client.Partitions())
	return &runBackend{
		where: conn.Where, title: conn.Where + " · library " + lib, logger: conn.Logger, private: conn.Server != nil,
		// The dispatchers (dependency, edge_cancel) run on completions.
		host:     host.Config{Backend: conn.Client, Completions: host.CompletionConfig{Enabled: true}},
		sampler:  admin.SamplerConfig{Backend: conn.Client},
		server:   admin.ServerConfig{Backend: conn.Client},
		demoNote: "demo workload running; Ctrl-C stops submitting, drains and exits",
		provider: conn.Client,
		prepareDemo: func(h *host.Host, cfg *workloadConfig, _ io.Writer) {
			// The workers stand in for scanners the host does not run.
			_, promoter := hostPlugin(h, "delayed_promoter")
			_, resolver := hostPlugin(h, "dependency")
			cfg.PromoteInline, cfg.ResolveInline = !promoter, !resolver
		},
		audit:       valkeyAudit(conn.Client),
		auditOnly:   valkeyAuditOnly(conn.Client),
		stateCounts: func(ctx context.Context) (string, error) { return stateCounts(ctx, conn.Client) },
		close:       conn.Close,
	}, nil
}

// libraryNote says what EnsureLibrary did, for the start-up line.
func libraryNote(act valkey.LibraryAction) string {
	switch act {
	case valkey.LibraryLoaded:
		return "installed on the server now"
	case valkey.LibraryReplaced:
		return "replaced an older copy on the server"
	}
	return "already on the server"
}

func libraryVersion(ctx context.Context, c *valkey.Client) string {
	v, err := c.LibraryVersion(ctx)
	if err != nil {
		return "?"
	}
	return v
}

// stateCounts counts every execution on every flow partition by
// public_state: one pipelined SMEMBERS round over the partitions, then one
// pipelined HGET round over the executions.
func stateCounts(ctx context.Context, c *valkey.Client) (string, error) {
	raw := c.Raw()
	n := int(c.Partitions().Flow)
	cmds := make([]valkeyCompleted, n)
	for i := range n {
		p := model.Partition{Family: model.FamilyFlow, Index: uint16(i)}
		cmds[i] = raw.B().Smembers().Key(model.KeysOn(p).AllExecutions()).Build()
	}
	var gets []valkeyCompleted
	for i, r := range raw.DoMulti(ctx, cmds...) {
		ids, err := r.AsStrSlice()
		if err != nil {
			return "", fmt.Errorf("read all_executions of partition %d: %w", i, err)
		}
		for _, id := range ids {
			gets = append(gets, raw.B().Hget().Key(model.KeysFor(model.ExecutionID(id)).Core()).Field("public_state").Build())
		}
	}
	counts := map[string]int64{}
	if len(gets) > 0 {
		for _, r := range raw.DoMulti(ctx, gets...) {
			st, err := r.ToString()
			if err != nil {
				st = "missing"
			}
			counts[st]++
		}
	}
	return stateLine(counts), nil
}

// stateLine is a count of executions by public_state as the run's last
// line shows it: model.PublicStates' order, then any other state (an
// execution whose state is "missing", a state fabric does not know) by
// name; "none" for no execution.
func stateLine(counts map[string]int64) string {
	var parts, other []string
	for _, st := range model.PublicStates {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", st, n))
		}
	}
	for st, n := range counts {
		if n > 0 && !slices.Contains(model.PublicStates, st) {
			other = append(other, fmt.Sprintf("%s=%d", st, n))
		}
	}
	slices.Sort(other)
	if parts = append(parts, other...); len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// backendConn is a connected client and, when no URL was given, the private
// server it runs on.
type backendConn struct {
	Client *valkey.Client
	Server *valkey.Server
	Where  string
	Logger *slog.Logger
}

// Close closes the client and stops the private server, if any.
func (c *backendConn) Close() {
	c.Client.Close()
	if c.Server != nil {
		c.Server.Stop()
	}
}

func (b *backendFlags) logger(env *cliEnv) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(b.logLevel)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, b.logLevel)
	}
	out := env.stderr
	if b.logOut != nil {
		out = b.logOut
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch b.logFormat {
	case "text", "":
		return slog.New(slog.NewTextHandler(out, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, b.logFormat)
}

func (b *backendFlags) connect(ctx context.Context, env *cliEnv) (*backendConn, error) {
	log, err := b.logger(env)
	if err != nil {
		return nil, err
	}
	conn := &backendConn{Logger: log, Where: redact.URL(b.url)}
	url := b.url
	if url == "" {
		srv, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: log})
		if err != nil {
			return nil, err
		}
		conn.Server, url = srv, srv.URL()
		conn.Where = fmt.Sprintf("private %s (pid %d, %s)", srv.Binary(), srv.PID(), srv.Socket())
	}
	cc := valkey.ClientConfig{URL: url, Logger: log, Partitions: b.partitions}
	if conn.Server == nil {
		// A private server is reached on its unix socket, without either.
		err = b.conn.apply(&cc, env)
		// Whatever reaches a log of this connection, its password does not.
		conn.Logger = slog.New(redact.Handler(log.Handler(), append(redact.Secrets(url), cc.Password)...))
		cc.Logger = conn.Logger
	}
	var cl *valkey.Client
	if err == nil {
		cl, err = dialWaiting(ctx, env, b, conn.Where, func() (*valkey.Client, error) { return valkey.Dial(ctx, cc) }, valkey.IsUnreachable)
	}
	if err != nil {
		if conn.Server != nil {
			conn.Server.Stop()
		}
		return nil, err
	}
	conn.Client = cl
	return conn, nil
}

// valkeyCompleted is a built valkey-go command.
type valkeyCompleted = vk.Completed

// Environment variables of the Valkey credentials: a password kept out of
// the command line (and so out of ps) and out of the config file.
const (
	envValkeyUser     = "FABRIC_VALKEY_USER"
	envValkeyPassword = "FABRIC_VALKEY_PASSWORD"
)

// connFlags are the credentials of a Valkey connection. The password
// comes from a file or the environment, never from a flag; each wins over
// what the URL carries.
type connFlags struct {
	user, passwordFile string
	// tls are the TLS files; any of them turns TLS on, as does a
	// rediss:// or valkeys:// URL.
	tls valkey.TLSOptions
}

func addConnFlags(fs *flag.FlagSet) *connFlags {
	c := &connFlags{}
	fs.StringVar(&c.user, "valkey-user", "", "Valkey ACL user (default: $"+envValkeyUser+", else the URL's, else the default user)")
	fs.StringVar(&c.passwordFile, "valkey-password-file", "", "file holding the Valkey password (default: $"+envValkeyPassword+", else the URL's)")
	fs.StringVar(&c.tls.CAFile, "valkey-tls-ca", "", "PEM CA bundle that signs the Valkey server's certificate (default: the system's roots); any --valkey-tls-* flag turns TLS on, as rediss:// does")
	fs.StringVar(&c.tls.CertFile, "valkey-tls-cert", "", "PEM client certificate for a Valkey server that verifies clients (with --valkey-tls-key)")
	fs.StringVar(&c.tls.KeyFile, "valkey-tls-key", "", "PEM key of --valkey-tls-cert")
	fs.StringVar(&c.tls.ServerName, "valkey-tls-server-name", "", "name the Valkey server's certificate must carry (default: the URL's host)")
	return c
}

// apply sets the credentials on cfg: a flag first, then the environment,
// then the URL's userinfo (which cfg.URL carries already).
func (c *connFlags) apply(cfg *valkey.ClientConfig, env *cliEnv) error {
	if c == nil {
		c = &connFlags{}
	}
	cfg.Username = c.user
	if cfg.Username == "" {
		cfg.Username = env.env(envValkeyUser)
	}
	switch {
	case c.passwordFile != "":
		b, err := os.ReadFile(c.passwordFile)
		if err != nil {
			// The path, not the content, is in the error.
			return fmt.Errorf("--valkey-password-file: %w", err)
		}
		cfg.Password = strings.TrimRight(string(b), "\r\n")
		if cfg.Password == "" {
			return fmt.Errorf("--valkey-password-file %s is empty", c.passwordFile)
		}
	default:
		cfg.Password = env.env(envValkeyPassword)
	}
	if !c.tls.IsZero() {
		tc, err := c.tls.Config()
		if err != nil {
			return err
		}
		cfg.TLS = tc
	}
	return nil
}

// dialWaiting is waitFor with the admin address answering meanwhile:
// while the backend at where is not reachable, a waitServer on
// b.waitAdmin (when set) answers /readyz and /healthz with 503 and the
// reason; b.adminBound is then the address it had, for the admin server
// proper to take over (port 0 keeps the port it picked). Both backends'
// runs dial through it.
func dialWaiting[T any](ctx context.Context, env *cliEnv, b *backendFlags, where string, dial func() (T, error), unreachable func(error) bool) (T, error) {
	var ws *waitServer
	notify := func(cause error) {
		if ws == nil && b.waitAdmin != "" {
			var lerr error
			if ws, lerr = startWaitServer(b.waitAdmin, b.waitTLS, b.waitHosts, where); lerr != nil {
				b.waitAdmin = "" // the admin server proper will say why
			} else {
				fmt.Fprintf(env.stderr, "fabric: meanwhile %s/readyz answers 503 with the reason\n", ws.URL())
			}
		}
		if ws != nil {
			ws.set(cause.Error())
		}
	}
	cl, err := waitFor(ctx, b.wait, env.stderr, where, dial, unreachable, notify)
	if ws != nil {
		b.adminBound = ws.Addr()
		ws.Stop()
	}
	return cl, err
}

// waitFor calls dial until it succeeds, retrying with backoff for up to
// wait while unreachable says the backend is not there yet, and says so
// on say at the first failure and every few seconds after, and to notify
// (when not nil) at every failure it waits out. Any other error
// (credentials, TLS) fails at once, as does every error when wait is 0.
func waitFor[T any](ctx context.Context, wait time.Duration, say io.Writer, where string, dial func() (T, error),
	unreachable func(error) bool, notify func(error)) (T, error) {
	start := time.Now()
	delay, said := 100*time.Millisecond, time.Time{}
	for {
		cl, err := dial()
		if err == nil {
			if !said.IsZero() {
				fmt.Fprintf(say, "fabric: backend %s reachable after %s\n", where, time.Since(start).Round(time.Millisecond))
			}
			return cl, nil
		}
		var zero T
		if wait <= 0 || !unreachable(err) {
			return zero, err
		}
		left := wait - time.Since(start)
		if left <= 0 {
			return zero, fmt.Errorf("backend %s not reachable within %s (--backend-wait): %w", where, wait, err)
		}
		if said.IsZero() || time.Since(said) >= 5*time.Second {
			fmt.Fprintf(say, "fabric: waiting for backend %s (%v); retrying for up to %s (--backend-wait)\n", where, err, wait)
			said = time.Now()
		}
		if notify != nil {
			notify(err)
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, fmt.Errorf("waiting for backend %s: %w", where, ctx.Err())
		case <-t.C:
		}
		delay = min(delay*2, 2*time.Second)
	}
}
