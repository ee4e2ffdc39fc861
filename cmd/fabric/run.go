package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
)

func init() {
	register(&command{
		name:    "run",
		summary: "Run the host on its embedded default (a private server, the library, a demo workload) or on --valkey-url.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			b := addBackendFlags(fs)
			demoN := fs.Int("demo", 60, "executions the demo workload creates (0: no demo)")
			lanes := fs.String("demo-lanes", "demo-a,demo-b,demo-c", "comma-separated lanes the demo spreads executions over")
			timeout := fs.Duration("demo-timeout", 60*time.Second, "upper bound on the demo run")
			secret := fs.String("waitpoint-hmac-secret", os.Getenv("FF_WAITPOINT_HMAC_SECRET"),
				"hex secret for waitpoint tokens, installed where none is (default $FF_WAITPOINT_HMAC_SECRET; a random one for a private server)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if *demoN < 0 {
					return fmt.Errorf("%w: --demo must be >= 0", errUsage)
				}
				laneList := splitList(*lanes)
				if len(laneList) == 0 {
					return fmt.Errorf("%w: --demo-lanes is empty", errUsage)
				}
				conn, err := b.connect(ctx, env)
				if err != nil {
					return err
				}
				defer conn.Close()
				fmt.Fprintf(env.stdout, "fabric %s on %s\n", Version, conn.Where)
				if _, err := hex.DecodeString(*secret); err != nil {
					return fmt.Errorf("%w: --waitpoint-hmac-secret must be hex: %v", errUsage, err)
				}
				if *secret == "" && conn.Server != nil {
					*secret = randomHex(32)
				}
				if err := conn.Client.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: laneList, WaitpointHMACSecret: *secret}); err != nil {
					return err
				}
				fmt.Fprintf(env.stdout, "flowfabric library %s loaded; partitions %+v\n", libraryVersion(ctx, conn.Client), conn.Client.Partitions())
				if *demoN == 0 {
					return nil
				}
				sum, err := runDemo(ctx, conn.Client, demoConfig{
					Executions: *demoN, DelayedEvery: 5, Delay: 500 * time.Millisecond,
					Lanes: laneList, PromoteInline: true, Timeout: *timeout,
				}, env.stdout, conn.Logger)
				if err != nil {
					return err
				}
				counts, err := stateCounts(ctx, conn.Client, laneList)
				if err != nil {
					return err
				}
				fmt.Fprintf(env.stdout, "demo: %s\n", sum)
				fmt.Fprintf(env.stdout, "executions by state: %s\n", counts)
				return nil
			}
		},
	})
}

func libraryVersion(ctx context.Context, c *valkey.Client) string {
	v, err := c.LibraryVersion(ctx)
	if err != nil {
		return "?"
	}
	return v
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

// stateCounts counts the executions on the lanes' partitions by
// public_state, reading every exec_core with one pipelined HGET batch per
// partition.
func stateCounts(ctx context.Context, c *valkey.Client, lanes []string) (string, error) {
	raw := c.Raw()
	seen := map[model.Partition]bool{}
	counts := map[string]int{}
	for _, lane := range lanes {
		p := c.Partitions().SoloPartition(lane)
		if seen[p] {
			continue
		}
		seen[p] = true
		ids, err := raw.Do(ctx, raw.B().Smembers().Key(model.KeysOn(p).AllExecutions()).Build()).AsStrSlice()
		if err != nil {
			return "", fmt.Errorf("read all_executions of %s: %w", p, err)
		}
		cmds := make([]valkeyCompleted, 0, len(ids))
		for _, id := range ids {
			cmds = append(cmds, raw.B().Hget().Key(model.KeysFor(model.ExecutionID(id)).Core()).Field("public_state").Build())
		}
		for _, r := range raw.DoMulti(ctx, cmds...) {
			st, err := r.ToString()
			if err != nil {
				st = "missing"
			}
			counts[st]++
		}
	}
	var parts []string
	for _, st := range append(model.PublicStates, "missing") {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", st, n))
		}
	}
	if len(parts) == 0 {
		return "none", nil
	}
	return strings.Join(parts, " "), nil
}
