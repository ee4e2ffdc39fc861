package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/replay"
)

func init() {
	register(&command{
		name:  "record",
		usage: "--plugin FILE --partition P --out CASE",
		summary: "Record one partition of a Valkey deployment for a plugin: every key of the partition " +
			"(but its waitpoint HMAC secrets), the deployment-wide keys the plugin's read grant names, and the server's time. " +
			"`fabric plugins replay FILE CASE` runs a plugin on it offline.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			url := fs.String("valkey-url", "", "the Valkey deployment to record from (required)")
			cf := addConnFlags(fs)
			plugin := fs.String("plugin", "", "the plugin file (.wasm) the case is for (required)")
			part := fs.String("partition", "", "the partition: flow:N, budget:N or quota:N, or its hash tag {fp:N} (required)")
			out := fs.String("out", "", "the case file to write (required; - for stdout)")
			cache := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory")
			partitions := &partitionsFlag{}
			fs.Var(partitions, "partitions", "the deployment's partition counts, flow=N,budget=N,quota=N (default: read from the deployment)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if *url == "" || *plugin == "" || *part == "" || *out == "" {
					return fmt.Errorf("%w: --valkey-url, --plugin, --partition and --out are required", errUsage)
				}
				in, err := host.Inspect(ctx, *plugin, host.InspectConfig{CacheDir: *cache})
				if err != nil {
					return fmt.Errorf("%s: %w", *plugin, err)
				}
				b := &backendFlags{url: *url, conn: cf, logLevel: "error", partitions: partitions.PartitionConfig}
				conn, err := b.connect(ctx, env)
				if err != nil {
					return err
				}
				defer conn.Close()
				p, err := replay.ParsePartition(*part, conn.Client.Partitions())
				if err != nil {
					return fmt.Errorf("%w: --partition: %w", errUsage, err)
				}
				if p.Family != in.Manifest.PartitionFamily() {
					return fmt.Errorf("%w: %s sweeps %s partitions, not %s", errUsage, in.Manifest.Name, in.Manifest.PartitionFamily(), p.Family)
				}
				cs, err := replay.Record(ctx, conn.Client, in.Manifest, in.SHA256, p)
				if err != nil {
					return err
				}
				if *out == "-" {
					return cs.Write(env.stdout)
				}
				f, err := os.CreateTemp(filepath.Dir(*out), ".case-*")
				if err != nil {
					return fmt.Errorf("write %s: %w", *out, err)
				}
				defer os.Remove(f.Name())
				if err := cs.Write(f); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("write %s: %w", *out, err)
				}
				if err := os.Rename(f.Name(), *out); err != nil {
					return fmt.Errorf("write %s: %w", *out, err)
				}
				fmt.Fprintf(env.stdout, "recorded %s for %s: %d keys at server time %d ms -> %s\n", cs.Tag, cs.Plugin, len(cs.Keys), cs.ServerTimeMs, *out)
				return nil
			}
		},
	})
	register(&command{
		name:  "plugins replay",
		usage: "[--against LIVE.wasm] FILE CASE",
		summary: "Replay a plugin on a recorded case (fabric record) in a private server at the recorded time: " +
			"print its actions and the keyspace difference they made. Two replays print the same bytes. " +
			"With --against, replay that version too and print the actions in which FILE differs from it.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			cache := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory")
			against := fs.String("against", "", "another version of the plugin (the live one) replayed on the same case: print the actions in which FILE differs from it")
			var config configFlag
			fs.Var(&config, "config", "a plugin config entry KEY=VALUE overriding its manifest (repeatable)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) != 2 {
					return fmt.Errorf("%w: want FILE CASE, got %d arguments", errUsage, len(args))
				}
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				cs, err := replay.ReadCase(f)
				f.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", args[1], err)
				}
				res, err := replay.Run(ctx, replay.Config{Wasm: args[0], Case: cs, CacheDir: *cache, Plugin: host.PluginConfig{Config: config.m}})
				if err != nil {
					return err
				}
				if err := res.Write(env.stdout); err != nil || *against == "" {
					return err
				}
				base, err := replay.Run(ctx, replay.Config{Wasm: *against, Case: cs, CacheDir: *cache, Plugin: host.PluginConfig{Config: config.m}})
				if err != nil {
					return fmt.Errorf("--against: %w", err)
				}
				diff := replay.Compare(base, res)
				fmt.Fprintf(env.stdout, "against %s %s (%s): %d actions differ\n", base.Plugin, base.Version, *against, len(diff))
				for _, d := range diff {
					fmt.Fprintln(env.stdout, "  "+d)
				}
				return nil
			}
		},
	})
}

// configFlag collects repeated KEY=VALUE flags.
type configFlag struct{ m map[string]string }

func (c *configFlag) String() string { return "" }

func (c *configFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return errors.New("want KEY=VALUE")
	}
	if c.m == nil {
		c.m = map[string]string{}
	}
	c.m[k] = v
	return nil
}
