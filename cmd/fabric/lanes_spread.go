package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/fabric-host/fabric/model"
)

func init() {
	register(&command{
		name:  "lanes spread",
		usage: "LANE",
		summary: "Spread a lane's new executions outside flows over many partitions (so over a cluster's nodes) instead of " +
			"FlowFabric's one partition per lane, or with --off go back to it; producers and workers pick the change up within 30 s.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			url := fs.String("valkey-url", "", "the deployment (required)")
			cf := addConnFlags(fs)
			k := fs.Uint("partitions", 0, "how many partitions the lane spreads over: its own and the ones after it (0: every flow partition)")
			off := fs.Bool("off", false, "back to FlowFabric's one partition per lane (executions already placed stay where they are)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				// Flags may follow LANE, as the README shows it
				// (fabric lanes spread LANE --valkey-url U --partitions K).
				args, err := positionals(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return fmt.Errorf("%w: want exactly one LANE", errUsage)
				}
				if *k > 65535 {
					return fmt.Errorf("%w: --partitions %d is above 65535", errUsage, *k)
				}
				if *off && *k != 0 {
					return fmt.Errorf("%w: --off takes no --partitions", errUsage)
				}
				c, done, err := valkeySDKClient(ctx, env, *url, cf)
				if err != nil {
					return err
				}
				defer done()
				s := model.LaneSpread{Spread: !*off, K: uint16(*k)}
				if err := c.SetLaneSpread(ctx, args[0], s); err != nil {
					return usageIfInvalid(err)
				}
				if *off {
					fmt.Fprintf(env.stdout, "lane %s: one partition (FlowFabric's crc16)\n", args[0])
					return nil
				}
				fmt.Fprintf(env.stdout, "lane %s: spread over %d partitions\n", args[0], len(s.Partitions(args[0], c.Partitions())))
				return nil
			}
		},
	})
}
