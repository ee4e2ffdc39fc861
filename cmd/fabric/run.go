package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/model"
)

func init() {
	register(&command{
		name: "run",
		summary: "Run the host: its plugins over a private server (or --valkey-url) with the demo workload, " +
			"until Ctrl-C or --duration, then drain and print a summary.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			b := addBackendFlags(fs)
			wf := addWorkloadFlags(fs)
			demo := fs.Bool("demo", true, "run the demo workload beside the host")
			pluginDir := fs.String("plugins", filepath.Join("bin", "plugins"), "plugin directory the host loads and watches (\"\": run without plugins)")
			cacheDir := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory (\"\": in memory)")
			statusFile := fs.String("status-file", "", "write the host's plugin status here for `fabric plugins list --status`")
			pgf := addRunPostgresFlags(fs) // run_postgres.go
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if on, err := pgf.enabled(); err != nil || on {
					if err != nil {
						return err
					}
					return runPostgres(ctx, env, pgf, wf, runPostgresOpts{pluginDir: *pluginDir, cacheDir: *cacheDir,
						statusFile: *statusFile, demo: *demo, logLevel: b.logLevel})
				}
				cfg, err := wf.config()
				if err != nil {
					return err
				}
				conn, err := b.connect(ctx, env)
				if err != nil {
					return err
				}
				defer conn.Close()
				fmt.Fprintf(env.stdout, "fabric %s on %s\n", Version, conn.Where)
				if err := conn.Client.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: cfg.Lanes, WaitpointHMACSecret: wf.secretFor(conn)}); err != nil {
					return err
				}
				fmt.Fprintf(env.stdout, "flowfabric library %s loaded; partitions %+v\n", libraryVersion(ctx, conn.Client), conn.Client.Partitions())
				h, err := startHost(ctx, env, conn, *pluginDir, *cacheDir, *statusFile, cfg.Lanes)
				if err != nil {
					return err
				}
				if h != nil {
					defer func() {
						printPlugins(env, h)
						h.Stop()
						h.Close(context.WithoutCancel(ctx))
					}()
				}
				if !*demo {
					fmt.Fprintln(env.stdout, "host running; Ctrl-C stops it")
					<-ctx.Done()
					return nil
				}
				// The workers stand in for scanners the host does not run.
				_, promoter := hostPlugin(h, "delayed_promoter")
				_, resolver := hostPlugin(h, "dependency")
				cfg.PromoteInline, cfg.ResolveInline = !promoter, !resolver
				cfg.Logger = conn.Logger
				fmt.Fprintln(env.stdout, "demo workload running; Ctrl-C stops submitting, drains and exits")
				sum, werr := runWorkload(ctx, conn.Client, cfg, env.stdout)
				fmt.Fprintf(env.stdout, "demo: %s\n", sum)
				counts, err := stateCounts(context.WithoutCancel(ctx), conn.Client)
				if err != nil {
					return err
				}
				fmt.Fprintf(env.stdout, "executions by state: %s\n", counts)
				return werr
			}
		},
	})
}

// startHost starts the plugin host on dir and waits for its first load.
// An empty dir, or the default dir when it does not exist, runs without a
// host (nil).
func startHost(ctx context.Context, env *cliEnv, conn *backendConn, dir, cacheDir, statusFile string, lanes []string) (*host.Host, error) {
	if dir == "" {
		return nil, nil
	}
	if _, err := os.Stat(dir); err != nil {
		if dir == filepath.Join("bin", "plugins") && os.IsNotExist(err) {
			fmt.Fprintf(env.stdout, "no plugin directory %s (run `make plugins`); running without plugins\n", dir)
			return nil, nil
		}
		return nil, fmt.Errorf("--plugins: %w", err)
	}
	if cacheDir != "" {
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("--cache-dir: %w", err)
		}
	}
	// Lane-scanning plugins scan the deployment's lanes.
	laneCfg := map[string]string{"lanes": strings.Join(lanes, ",")}
	plugins := map[string]host.PluginConfig{}
	for _, name := range laneScanningPlugins {
		plugins[name] = host.PluginConfig{Config: laneCfg}
	}
	h, err := host.New(host.Config{PluginDir: dir, CacheDir: cacheDir, Backend: conn.Client,
		Logger: conn.Logger, StatusFile: statusFile, Plugins: plugins})
	if err != nil {
		return nil, err
	}
	if err := h.Start(ctx); err != nil {
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
	fmt.Fprintf(env.stdout, "host: %d plugins from %s\n", len(h.Plugins()), dir)
	for _, p := range h.Plugins() {
		fmt.Fprintf(env.stdout, "  %-22s %-8s %-10s %s\n", p.Name, p.Version, p.State, p.Reason)
	}
	return h, nil
}

// laneScanningPlugins take a "lanes" config entry, set to the lanes the
// deployment runs.
var laneScanningPlugins = []string{"delayed_promoter", "unblock", "dependency_reconciler", "retention_trimmer"}

// hostPlugin reports whether h serves the named plugin.
func hostPlugin(h *host.Host, name string) (host.PluginStatus, bool) {
	if h == nil {
		return host.PluginStatus{}, false
	}
	return h.Plugin(name)
}

// printPlugins prints what each plugin did during the run.
func printPlugins(env *cliEnv, h *host.Host) {
	for _, p := range h.Plugins() {
		fmt.Fprintf(env.stdout, "plugin %s %s: %d sweeps, %d calls, %d faults, scanned %d, acted %d, errors %d\n",
			p.Name, p.Version, p.Cycles, p.Calls, p.Faults, p.Totals.Scanned, p.Totals.Acted, p.Totals.Errors)
	}
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
	counts := map[string]int{}
	if len(gets) > 0 {
		for _, r := range raw.DoMulti(ctx, gets...) {
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
