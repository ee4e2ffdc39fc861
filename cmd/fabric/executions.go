package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/internal/audit"
	"github.com/fabric-host/fabric/internal/termsafe"
	"github.com/fabric-host/fabric/model"
)

// errStuck is returned when `fabric executions stuck` found violations,
// so scripts see a non-zero exit.
var errStuck = errors.New("executions left behind")

func init() {
	register(&command{
		name: "executions stuck",
		summary: "List every execution of a deployment that neither ended nor states a live reason to wait " +
			"(leased, eligible, delayed, blocked, suspended, awaiting reclaim); exit 1 when there is one.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			url := fs.String("valkey-url", "", "the Valkey deployment to check (this or --postgres-url is required: a private server has nothing to check)")
			cf := addConnFlags(fs)
			pgf := addPostgresFlags(fs)
			grace := fs.Duration("grace", 30*time.Second, "how late a due timer (lease expiry, delay, suspension timeout) may be before it counts as missed")
			reclaim := fs.Duration("reclaim-within", 2*time.Minute, "how long an expired lease may await reclaim by a worker of its lane")
			limit := fs.Int("limit", 100, "print at most this many violations")
			asJSON := fs.Bool("json", false, "print the report as JSON")
			partitions := &partitionsFlag{}
			fs.Var(partitions, "partitions", "the deployment's partition counts, flow=N,budget=N,quota=N (default 256/32/32)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if (*url == "") == (pgf.url == "") {
					return fmt.Errorf("%w: give one of --valkey-url and --postgres-url (the deployment to check)", errUsage)
				}
				if err := pgf.checkPasswordFile(fs); err != nil {
					return err
				}
				if pgf.url != "" && partitions.PartitionConfig != (model.PartitionConfig{}) {
					return fmt.Errorf("%w: --partitions does not apply with --postgres-url: a database's partition counts are FlowFabric's 256/32/32", errUsage)
				}
				if *limit <= 0 {
					return fmt.Errorf("%w: --limit must be positive, got %d", errUsage, *limit)
				}
				opts := audit.Options{Grace: *grace, ReclaimWithin: *reclaim, Limit: *limit}
				var rep *audit.Report
				if pgf.url != "" {
					t, err := pgf.target(ctx, env)
					if err != nil {
						return err
					}
					pool, err := t.pool(ctx)
					if err != nil {
						return err
					}
					defer pool.Close()
					if err := postgres.CheckSchema(ctx, pool); err != nil {
						return err
					}
					if rep, err = audit.Postgres(ctx, pool, opts); err != nil {
						return err
					}
				} else {
					b := &backendFlags{url: *url, conn: cf, logLevel: "error", partitions: partitions.PartitionConfig}
					conn, err := b.connect(ctx, env)
					if err != nil {
						return err
					}
					defer conn.Close()
					if rep, err = audit.Valkey(ctx, conn.Client, opts); err != nil {
						return err
					}
				}
				if *asJSON {
					if err := printJSON(env.stdout, rep); err != nil {
						return err
					}
				} else {
					termsafe.Strings(rep) // ids, lanes and reasons read from the backend
					fmt.Fprintln(env.stdout, rep.Summary())
					for _, v := range rep.Violations {
						fmt.Fprintln(env.stdout, v)
					}
					if rep.More > 0 {
						fmt.Fprintf(env.stdout, "... and %d more\n", rep.More)
					}
				}
				if !rep.OK() {
					return errStuck
				}
				return nil
			}
		},
	})
}
