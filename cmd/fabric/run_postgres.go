package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/admin"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/internal/redact"
	"github.com/fabric-host/fabric/model"
)

// runPGFlags are the flags `fabric run` adds for the Postgres backend.
type runPGFlags struct {
	backend *string
	migrate *bool
	pg      *pgFlags
}

func addRunPostgresFlags(fs *flag.FlagSet) *runPGFlags {
	return &runPGFlags{
		backend: fs.String("backend", "valkey", "valkey or postgres; --postgres-url implies postgres"),
		migrate: fs.Bool("migrate", false, "with --postgres-url, apply the schema migrations before running (as fabric migrate does); "+
			"without it a database not migrated is refused (a throwaway cluster is always migrated)"),
		pg: addPostgresFlags(fs),
	}
}

// enabled reports whether the run targets Postgres: --backend postgres,
// or --postgres-url without --backend. A --postgres-url with --backend
// valkey given too is a usage error (one of them is a mistake, and
// picking either would surprise), as is --postgres-password-file without
// --postgres-url and --migrate on Valkey.
func (f *runPGFlags) enabled(fs *flag.FlagSet) (bool, error) {
	given := givenFlags(fs)
	var on bool
	switch *f.backend {
	case "postgres":
		on = true
	case "valkey":
		if f.pg.url != "" && given["backend"] {
			return false, fmt.Errorf("%w: --postgres-url names a Postgres database but --backend is valkey: "+
				"drop --backend valkey (--postgres-url implies postgres) or drop --postgres-url", errUsage)
		}
		on = f.pg.url != ""
	default:
		return false, fmt.Errorf("%w: --backend %q: want valkey or postgres", errUsage, *f.backend)
	}
	if !on && *f.migrate {
		return false, fmt.Errorf("%w: --migrate applies on Postgres only (with --postgres-url or --backend postgres)", errUsage)
	}
	if err := f.pg.checkPasswordFile(fs); err != nil {
		return false, err
	}
	return on, nil
}

// pgRefused are the `fabric run` flags that do not apply on Postgres, with
// why: given (on the command line or in --config) with --backend
// postgres, the run refuses to start rather than ignore them.
var pgRefused = []struct{ flag, why string }{
	{"valkey-url", "it names a Valkey deployment"},
	{"valkey-user", "it is a Valkey credential"},
	{"valkey-password-file", "it is a Valkey credential"},
	{"valkey-tls-ca", "it configures Valkey TLS (Postgres TLS is the URL's sslmode, sslrootcert, sslcert, sslkey)"},
	{"valkey-tls-cert", "it configures Valkey TLS (Postgres TLS is the URL's sslmode, sslrootcert, sslcert, sslkey)"},
	{"valkey-tls-key", "it configures Valkey TLS (Postgres TLS is the URL's sslmode, sslrootcert, sslcert, sslkey)"},
	{"valkey-tls-server-name", "it configures Valkey TLS (Postgres TLS is the URL's sslmode, sslrootcert, sslcert, sslkey)"},
	{"partition-leases", "partition leases are Valkey's; on Postgres every host scans every partition and row locks keep hosts apart"},
	{"host-id", "it is a partition-lease id, and partition leases are Valkey's"},
	{"lease-ttl", "it is the partition-lease TTL, and partition leases are Valkey's"},
	{"waitpoint-hmac-secret", "it is installed in Valkey's keystore; Postgres seeds its own waitpoint secret (ff_waitpoint_hmac) at the first suspend"},
}

// refuse returns a usage error naming the first given flag that does not
// apply on Postgres; --partitions applies only to a throwaway cluster (a
// new deployment: Postgres stores no partition config to check a
// database's against).
func (f *runPGFlags) refuse(fs *flag.FlagSet) error {
	given := givenFlags(fs)
	for _, r := range pgRefused {
		if given[r.flag] {
			return fmt.Errorf("%w: --%s does not apply on Postgres: %s", errUsage, r.flag, r.why)
		}
	}
	if given["partitions"] && f.pg.url != "" {
		return fmt.Errorf("%w: --partitions does not apply with --postgres-url: it sets a new deployment's counts, "+
			"and a database's are FlowFabric's 256/32/32 (use it with the throwaway cluster only)", errUsage)
	}
	return nil
}

// opener picks `fabric run`'s backend from --backend and --postgres-url.
// Postgres is refused with a flag that does not apply there (refuse),
// Valkey with a Postgres flag (enabled).
func (f *runPGFlags) opener(fs *flag.FlagSet) (runBackendOpener, error) {
	on, err := f.enabled(fs)
	if err != nil {
		return nil, err
	}
	if !on {
		return openValkeyRun, nil
	}
	if err := f.refuse(fs); err != nil {
		return nil, err
	}
	return f.openPostgresRun, nil
}

// openPostgresRun is `fabric run`'s Postgres: the client on --postgres-url
// or a throwaway cluster, migrated (the cluster always, the given
// database with --migrate; without it a database not migrated is refused
// with postgres.ErrNotMigrated, naming `fabric migrate`), the census and
// console over SQL, the host running the pg_* plugins (Valkey
// plugins load disabled) with completion dispatch pushed by LISTEN
// fabric_completion, and the demo workload (runWorkload) on Postgres workers.
func (f *runPGFlags) openPostgresRun(ctx context.Context, env *cliEnv, b *backendFlags, _ *workloadFlags, o *runFlags, cfg workloadConfig, out io.Writer) (_ *runBackend, err error) {
	log, err := b.logger(env)
	if err != nil {
		return nil, err
	}
	t, err := f.pg.target(ctx, env)
	if err != nil {
		return nil, err
	}
	var pc *postgres.Client
	var stopWakeups func()
	closeAll := func() {
		if stopWakeups != nil {
			stopWakeups()
		}
		if pc != nil {
			pc.Close()
		}
		t.Close()
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	log = slog.New(redact.Handler(log.Handler(), append(redact.Secrets(t.URL), t.Password)...))
	var parts model.PartitionConfig
	if t.Server != nil {
		parts = o.partitions.PartitionConfig
	}
	pc, err = dialWaiting(ctx, env, b, t.Where, func() (*postgres.Client, error) {
		return postgres.Connect(ctx, postgres.ClientConfig{URL: t.URL, Password: t.Password, Logger: log,
			MaxConns: int32(cfg.Workers*2 + 8 + sweepFanOut), Partitions: parts})
	}, postgres.IsUnreachable)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "fabric %s on Postgres: %s\n", Version, t.Where)
	version, err := pgSchema(ctx, pc, t.Server == nil && !*f.migrate, out)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "schema version %d; partitions %+v\n", version, pc.Partitions())
	// Completion dispatch is pushed: every flow member's completion event
	// (LISTEN fabric_completion) sweeps pg_dependency_reconciler on its
	// partition at once; the plugin's own sweep stays as the safety net,
	// every postgres.DependencySafetyInterval rather than its stock 1 s
	// (a config file's interval wins). The host being the dispatcher,
	// stale_ms 0 lets it take fresh events.
	wakeups, stop, err := pc.CompletionWakeups(ctx)
	if err != nil {
		return nil, err
	}
	stopWakeups = stop
	return &runBackend{
		where: "postgres: " + t.Where, title: fmt.Sprintf("Postgres %s · schema %d", t.Where, version), logger: log,
		private: t.Server != nil,
		host: host.Config{Postgres: pc.PluginSQL(), Partitions: pc.Partitions(),
			Completions: host.CompletionConfig{Enabled: true, Wakeups: wakeups}},
		pluginDefaults:  map[string]map[string]string{"pg_dependency_reconciler": {"stale_ms": "0"}},
		pluginIntervals: map[string]time.Duration{"pg_dependency_reconciler": postgres.DependencySafetyInterval},
		sampler:         admin.SamplerConfig{Take: admin.PGCensus(pc)},
		server:          admin.ServerConfig{Probe: admin.PGProbe(pc), Console: admin.NewConsole(postgres.NewDriver(pc))},
		demoNote:        "demo workload running on Postgres; Ctrl-C stops submitting, drains and exits",
		provider:        pc,
		prepareDemo: func(h *host.Host, _ *workloadConfig, say io.Writer) {
			// On Postgres a worker neither promotes delayed work nor
			// resolves flow edges: the host's scanners do.
			for _, p := range []struct{ name, what string }{
				{"pg_delayed_promoter", "delayed and retried work will not run again"},
				{"pg_dependency_reconciler", "flow members after the first will not become eligible"},
			} {
				if _, ok := hostPlugin(h, p.name); !ok {
					fmt.Fprintf(say, "warning: no %s plugin: %s\n", p.name, p.what)
				}
			}
		},
		audit: func(ctx context.Context) (*audit.Report, error) {
			return audit.Postgres(ctx, pc.Pool(), audit.Options{})
		},
		auditOnly: func(ctx context.Context, ids map[string]bool) (*audit.Report, error) {
			return audit.Postgres(ctx, pc.Pool(), audit.Options{Only: ids})
		},
		stateCounts: func(ctx context.Context) (string, error) { return pgStateCounts(ctx, pc) },
		close:       closeAll,
	}, nil
}

// pgSchema readies the database's schema and returns its version: with
// checkOnly it only checks it (postgres.CheckSchema: a database not
// migrated, or migrated by an older fabric, is refused with the command
// that fixes it), else it applies the migrations the ledger lacks.
func pgSchema(ctx context.Context, pc *postgres.Client, checkOnly bool, out io.Writer) (int64, error) {
	if !checkOnly {
		res, err := postgres.Migrate(ctx, pc.Pool(), postgres.MigrateConfig{Progress: out})
		if err != nil {
			return 0, err
		}
		return res.Version, nil
	}
	if err := postgres.CheckSchema(ctx, pc.Pool()); err != nil {
		return 0, fmt.Errorf("%w (or give `fabric run` --migrate)", err)
	}
	return postgres.SchemaVersion(ctx, pc.Pool())
}

// pgStateCounts counts the database's executions by public_state, as
// stateCounts does on Valkey.
func pgStateCounts(ctx context.Context, pc *postgres.Client) (string, error) {
	rows, err := pc.Pool().Query(ctx, `SELECT public_state, count(*) FROM ff_exec_core GROUP BY 1`)
	if err != nil {
		return "", fmt.Errorf("count executions by state: %w", err)
	}
	counts := map[string]int64{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return "", fmt.Errorf("count executions by state: %w", err)
		}
		counts[st] = n
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("count executions by state: %w", err)
	}
	return stateLine(counts), nil
}
