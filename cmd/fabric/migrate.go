package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/fabric-host/fabric/backend/postgres"
)

func init() {
	register(&command{
		name:    "migrate",
		summary: "Apply the Postgres schema migrations (FlowFabric's schema) to --postgres-url, or to a throwaway cluster as a demo.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			pf := addPostgresFlags(fs)
			target := fs.Int64("target", 0, "stop after this migration version (0: all)")
			list := fs.Bool("list", false, "list the embedded migrations and exit")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if *target < 0 {
					return fmt.Errorf("%w: --target must be >= 0", errUsage)
				}
				if err := pf.checkPasswordFile(fs); err != nil {
					return err
				}
				if *list {
					for _, m := range postgres.Migrations() {
						tx := "tx"
						if m.NoTx {
							tx = fmt.Sprintf("%d txs", len(m.Chunks()))
						}
						fmt.Fprintf(env.stdout, "%4d  %-36s %s\n", m.Version, m.Name, tx)
					}
					return nil
				}
				t, err := pf.target(ctx, env)
				if err != nil {
					return err
				}
				defer t.Close()
				fmt.Fprintf(env.stdout, "migrating %s\n", t.Where)
				pool, err := t.pool(ctx)
				if err != nil {
					return err
				}
				defer pool.Close()
				_, err = postgres.Migrate(ctx, pool, postgres.MigrateConfig{Progress: env.stdout, Target: *target})
				return err
			}
		},
	})
}
