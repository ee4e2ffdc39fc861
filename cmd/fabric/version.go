package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/fabric-host/fabric/lua"
)

// Version is fabric's release version.
const Version = "0.1.0-dev"

func init() {
	register(&command{
		name:    "version",
		summary: "Print fabric's version, the flowfabric library version and the Go runtime.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				rev := ""
				if bi, ok := debug.ReadBuildInfo(); ok {
					for _, s := range bi.Settings {
						if s.Key == "vcs.revision" {
							rev = " " + s.Value
						}
					}
				}
				fmt.Fprintf(env.stdout, "fabric %s%s\nflowfabric library %s\n%s %s/%s\n", Version, rev, lua.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
				return nil
			}
		},
	})
}
