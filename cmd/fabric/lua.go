package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/fabric-host/fabric/lua"
)

func init() {
	register(&command{
		name:    "lua print",
		summary: "Print exactly the flowfabric library source fabric loads.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				_, err := io.WriteString(env.stdout, lua.Source())
				return err
			}
		},
	})
	register(&command{
		name:    "lua load",
		summary: "Load (or replace) the flowfabric library on the server at --valkey-url.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			b := addBackendFlags(fs)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if b.url == "" {
					// Without a URL connect starts a private server, which
					// would stop (library and all) as this command exits.
					return fmt.Errorf("%w: --valkey-url is required (the server to load the library on)", errUsage)
				}
				conn, err := b.connect(ctx, env)
				if err != nil {
					return err
				}
				defer conn.Close()
				act, err := conn.Client.EnsureLibrary(ctx)
				if err != nil {
					return err
				}
				fmt.Fprintf(env.stdout, "flowfabric library %s: %s (%d functions) on %s\n", lua.Version, act, len(lua.Functions()), conn.Where)
				return nil
			}
		},
	})
}
