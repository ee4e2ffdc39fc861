package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/termsafe"
)

// defaultCacheDir is where the CLI keeps wazero's compilation cache, so
// inspecting the same file twice compiles it once.
func defaultCacheDir() string {
	if base, err := os.UserCacheDir(); err == nil {
		return filepath.Join(base, "fabric", "wazero")
	}
	return ""
}

func init() {
	register(&command{
		name:    "plugins list",
		summary: "List plugins: a directory inspected offline, or a running host's status file.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			dir := fs.String("dir", filepath.Join("bin", "plugins"), "plugin directory to inspect offline")
			status := fs.String("status", "", "status file of a running host (fabric run --status-file); overrides --dir")
			cache := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory")
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				var snap host.Snapshot
				if *status != "" {
					b, err := os.ReadFile(*status)
					if err != nil {
						return fmt.Errorf("read status: %w", err)
					}
					if err := json.Unmarshal(b, &snap); err != nil {
						return fmt.Errorf("status file %s: %w", *status, err)
					}
				} else {
					var err error
					if snap, err = inspectDir(ctx, *dir, *cache); err != nil {
						return err
					}
				}
				if *asJSON {
					return printJSON(env.stdout, snap)
				}
				termsafe.Strings(&snap) // names, versions and reasons from plugin files
				if *status != "" {
					if gone := hostGone(snap); gone != "" {
						fmt.Fprintf(env.stdout, "host not running: %s; its last known state (written %s):\n", gone, snap.At.Format(time.RFC3339))
					}
				}
				printSnapshot(env.stdout, snap)
				return nil
			}
		},
	})
	register(&command{
		name:    "plugins inspect",
		usage:   "FILE",
		summary: "Show a plugin file's manifest, what it requests against what it is granted, its signature, digest, imports and exports.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			cache := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory")
			config := fs.String("config", "", "fabric.toml whose grants and trusted keys apply (default: the built-in grants)")
			trust := addTrustFlags(fs)
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want one FILE", errUsage)
				}
				ic, err := inspectConfig(fs, *cache, *config, args[0], trust)
				if err != nil {
					return err
				}
				in, err := host.Inspect(ctx, args[0], ic)
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(env.stdout, in)
				}
				termsafe.Strings(in) // the manifest is the plugin file's
				m := in.Manifest
				w := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "file\t%s\nsha256\t%s\nsize\t%d bytes\ncompile\t%s\n", in.Path, in.SHA256, in.Size, in.Compile.Round(time.Millisecond))
				fmt.Fprintf(w, "signature\t%s\n", signatureLine(in, len(ic.TrustedKeys) > 0))
				fmt.Fprintf(w, "name\t%s\nversion\t%s\nkind\t%s\nabi\t%s (host %s)\n", m.Name, m.Version, m.Kind, m.ABI, abi.Version)
				fmt.Fprintf(w, "interval_ms\t%d\npartition_family\t%s\nbatch_size\t%d\n", m.IntervalMs, m.Family, m.BatchSize)
				fmt.Fprintf(w, "config\t%s\n", formatConfig(m.Config))
				fmt.Fprintf(w, "imports\t%s\nexports\t%s\n", list(in.Imports), list(in.Exports))
				fmt.Fprintf(w, "\nGRANT\tREQUESTED\tGRANTED\n")
				for _, r := range grantRows(in) {
					fmt.Fprintf(w, "%s\t%s\t%s\n", r[0], r[1], r[2])
				}
				verdict := "within its grant"
				if in.NotGranted != "" {
					verdict = "REFUSED: " + in.NotGranted
				}
				fmt.Fprintf(w, "verdict\t%s\n", verdict)
				return w.Flush()
			}
		},
	})
	register(&command{
		name:    "plugins validate",
		usage:   "FILE",
		summary: "Check a plugin file as the host would before loading it, grant and signature included; exit 1 with the reason if it would be refused.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			cache := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory")
			config := fs.String("config", "", "fabric.toml whose grants and trusted keys apply (default: the built-in grants)")
			trust := addTrustFlags(fs)
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want one FILE", errUsage)
				}
				ic, err := inspectConfig(fs, *cache, *config, args[0], trust)
				if err != nil {
					return err
				}
				in, err := host.Inspect(ctx, args[0], ic)
				if err != nil {
					return fmt.Errorf("%s is not a valid plugin: %w", args[0], err)
				}
				termsafe.Strings(in)
				if in.NotGranted != "" {
					// On stdout, as TOML (the header a comment), so that
					// `fabric plugins validate F >> fabric.toml` keeps it
					// for review; the refusal itself goes to stderr.
					fmt.Fprintf(env.stdout, "# the grant that would admit it (review before adding it to fabric.toml):\n%s", grantTOML(in))
					return fmt.Errorf("%s would be refused: %s requests more than it is granted: %s", args[0], in.Manifest.Name, in.NotGranted)
				}
				fmt.Fprintf(env.stdout, "ok: %s %s (%s, ABI %s) sha256 %s\n", in.Manifest.Name, in.Manifest.Version, in.Manifest.Kind, in.Manifest.ABI, in.SHA256)
				return nil
			}
		},
	})
}

func init() {
	register(&command{
		name:  "plugins prewarm",
		usage: "FILE...",
		summary: "Compile plugin files into the compilation cache, in parallel, skipping those it holds already, so that a host then loads them in moments; " +
			"--check only says which it lacks (exit 1 if any).",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			cache := fs.String("cache-dir", defaultCacheDir(), "wazero compilation cache directory")
			check := fs.Bool("check", false, "compile nothing: list the files the cache lacks, exit 1 if any")
			tests := fs.Bool("tests", false, "with --check: look for the entries Go test binaries use (kept apart from this binary's)")
			jobs := fs.Int("jobs", runtime.NumCPU(), "files compiled at once")
			backend := fs.String("backend", "all", "only the files a host on this backend compiles: valkey, postgres or all (a host reads the manifest of a plugin for the other backend without compiling it)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) == 0 {
					return fmt.Errorf("%w: want one or more FILEs", errUsage)
				}
				if *cache == "" {
					return fmt.Errorf("%w: --cache-dir is empty: nothing to prewarm", errUsage)
				}
				if *tests && !*check {
					return fmt.Errorf("%w: --tests goes with --check (test binaries fill their own entries)", errUsage)
				}
				files := args
				switch *backend {
				case "all":
				case host.BackendValkey, host.BackendPostgres:
					files = nil
					for _, f := range args {
						if b, err := host.PluginBackend(f); err != nil || b == "" || b == *backend {
							files = append(files, f)
						}
					}
				default:
					return fmt.Errorf("%w: --backend %q: want valkey, postgres or all", errUsage, *backend)
				}
				return prewarm(ctx, env, files, *cache, *check, *tests, max(1, *jobs))
			}
		},
	})
}

// prewarm compiles into cache the files it lacks, jobs at a time (check:
// only lists them).
func prewarm(ctx context.Context, env *cliEnv, files []string, cache string, check, tests bool, jobs int) error {
	start := time.Now()
	var lack []string
	for _, f := range files {
		ok, err := host.CacheHolds(cache, f, tests)
		if err != nil {
			return err
		}
		if !ok {
			lack = append(lack, f)
		}
	}
	if check {
		for _, f := range lack {
			fmt.Fprintf(env.stdout, "not compiled: %s\n", f)
		}
		if len(lack) > 0 {
			return fmt.Errorf("the cache lacks %d of %d files", len(lack), len(files))
		}
		return nil
	}
	if len(lack) == 0 {
		fmt.Fprintf(env.stdout, "prewarm: all %d files compiled already\n", len(files))
		return nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return fmt.Errorf("--cache-dir: %w", err)
	}
	jobs = min(jobs, len(lack))
	fmt.Fprintf(env.stdout, "prewarm: compiling %d of %d files, %d at a time\n", len(lack), len(files), jobs)
	errs := make([]error, len(lack))
	next := make(chan int)
	var wg sync.WaitGroup
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := host.Inspect(ctx, lack[i], host.InspectConfig{CacheDir: cache}); err != nil {
					errs[i] = fmt.Errorf("%s: %w", lack[i], err)
				}
			}
		}()
	}
	for i := range lack {
		if ctx.Err() != nil {
			break // interrupted: the files left are not even tried
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("prewarm interrupted: %w", context.Cause(ctx))
	}
	err := errors.Join(errs...)
	if err == nil {
		fmt.Fprintf(env.stdout, "prewarm: compiled %d files in %s\n", len(lack), time.Since(start).Round(100*time.Millisecond))
	}
	return err
}

// inspectDir inspects every *.wasm of dir offline.
func inspectDir(ctx context.Context, dir, cache string) (host.Snapshot, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.wasm"))
	if err != nil {
		return host.Snapshot{}, err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return host.Snapshot{}, fmt.Errorf("plugin directory %s: %w", dir, errors.Join(err, errors.New("not a directory")))
	}
	sort.Strings(paths)
	snap := host.Snapshot{At: time.Now(), ABI: abi.Version, Dir: dir}
	for _, p := range paths {
		in, err := host.Inspect(ctx, p, host.InspectConfig{CacheDir: cache})
		if err != nil {
			snap.Files = append(snap.Files, host.FileStatus{Path: p, State: host.StateInvalid, Error: err.Error()})
			continue
		}
		m := in.Manifest
		snap.Plugins = append(snap.Plugins, host.PluginStatus{
			Name: m.Name, Version: m.Version, Kind: m.Kind, ABI: m.ABI, SHA256: in.SHA256, Path: p,
			State: host.StateValid, IntervalMs: m.IntervalMs,
		})
		snap.Files = append(snap.Files, host.FileStatus{Path: p, SHA256: in.SHA256, Plugin: m.Name, State: host.StateValid})
	}
	return snap, nil
}

func printSnapshot(w io.Writer, snap host.Snapshot) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tKIND\tABI\tSHA256\tSTATE\tLAST RUN\tCALLS\tERRORS\tREASON")
	for _, p := range snap.Plugins {
		last := "-"
		if !p.LastRun.IsZero() {
			last = p.LastRun.Format(time.RFC3339)
		}
		errs := fmt.Sprintf("%d", p.Totals.Errors+uint32(p.Faults))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.Name, p.Version, p.Kind, p.ABI, short(p.SHA256), p.State, last, p.Calls, errs, oneLine(p.Reason))
	}
	for _, f := range snap.Files {
		if f.State != host.StateInvalid {
			continue
		}
		fmt.Fprintf(tw, "%s\t-\t-\t-\t%s\t%s\t-\t-\t-\t%s\n", filepath.Base(f.Path), short(f.SHA256), f.State, oneLine(f.Error))
	}
	tw.Flush()
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	if sha == "" {
		return "-"
	}
	return sha
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func list(ss []string) string {
	if len(ss) == 0 {
		return "-"
	}
	return strings.Join(ss, " ")
}

func formatConfig(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

// signatureLine is inspect's signature row: the key that verified the
// file, or why none did — no signature file beside it, no trusted key
// given to check it against, or none of the given keys signed it.
func signatureLine(in *host.Inspection, keysGiven bool) string {
	switch {
	case in.Signature != nil:
		return "key " + in.Signature.Key
	case !fileExists(in.Path + host.SignatureSuffix):
		return "unsigned (no " + filepath.Base(in.Path) + host.SignatureSuffix + ")"
	case !keysGiven:
		return "not checked: " + filepath.Base(in.Path) + host.SignatureSuffix + " is there; give --trusted-keys to verify it"
	default:
		return "not by a trusted key (" + filepath.Base(in.Path) + host.SignatureSuffix + " verifies against none of --trusted-keys)"
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// hostGone says why the host of a status file is not running ("" when it
// may be): it stopped and said so, or, on this machine, its process is
// gone (killed before it could).
func hostGone(snap host.Snapshot) string {
	if snap.Stopped {
		return "it stopped"
	}
	if name, err := os.Hostname(); err == nil && snap.PID > 0 && snap.Hostname == name && !processAlive(snap.PID) {
		return fmt.Sprintf("its process %d is gone (it did not stop cleanly)", snap.PID)
	}
	return ""
}

// processAlive reports whether a process pid exists on this machine.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
