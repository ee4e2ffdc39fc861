package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/postgres"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
)

// pluginFile finds a built plugin: bin/plugins/<name>.wasm (make plugins)
// or testdata/plugins/<name>.wasm (fixtures).
func (e *benchEnv) pluginFile(name string) (string, error) {
	for _, p := range []string{filepath.Join(e.repo, "bin", "plugins", name+".wasm"), filepath.Join(e.repo, "testdata", "plugins", name+".wasm")} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s.wasm is not built: run `make plugins`", name)
}

// defaultPlugins lists the files of host.DefaultPlugins, the execution
// scanners `fabric run` loads.
func (e *benchEnv) defaultPlugins() ([]string, error) {
	names := host.DefaultPlugins
	if e.size.Plugins != nil {
		names = e.size.Plugins
	}
	var out []string
	for _, name := range names {
		f, err := e.pluginFile(name)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// pluginDir makes a temporary plugin directory holding copies of files.
func pluginDir(files ...string) (string, error) {
	dir, err := os.MkdirTemp("", "fabric-bench-plugins-")
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if err := copyFile(f, filepath.Join(dir, filepath.Base(f))); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// copyFile writes dst atomically (temp file + rename), as a deploy does.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// prewarm compiles files into the shared compilation cache, as `fabric
// plugins validate` does before a deploy.
func (e *benchEnv) prewarm(ctx context.Context, files ...string) error {
	for _, f := range files {
		if _, err := host.Inspect(ctx, f, host.InspectConfig{CacheDir: e.cache}); err != nil {
			return fmt.Errorf("prewarm %s: %w", f, err)
		}
	}
	return nil
}

// hostOpts are the host settings a scenario varies.
type hostOpts struct {
	plugins     map[string]host.PluginConfig
	records     int
	timers      host.TimerConfig
	completions host.CompletionConfig
	// policy is the host's grants (nil: host.StockPolicy).
	policy *host.Policy
	// observer, when set, is the host's Observer.
	observer host.Observer
	// pg, when set, is the Postgres deployment the host runs on instead
	// of Valkey (startHost's vc nil), as `fabric run --backend postgres`
	// runs it: plugins' sql_query on its PluginSQL, its partition counts.
	pg *postgres.Client
}

// stockPluginDir prewarms the compilation cache with the stock plugin
// name and returns a fresh plugin directory holding only it (the caller
// removes it).
func (e *benchEnv) stockPluginDir(ctx context.Context, name string) (string, error) {
	f, err := e.pluginFile(name)
	if err != nil {
		return "", err
	}
	if err := e.prewarm(ctx, f); err != nil {
		return "", err
	}
	return pluginDir(f)
}

// startHost starts a host on dir over vc (or o.pg, vc nil) and waits for
// its initial load.
func (e *benchEnv) startHost(ctx context.Context, dir string, vc *valkey.Client, o hostOpts) (*host.Host, error) {
	cfg := host.Config{PluginDir: dir, CacheDir: e.cache, Backend: vc, Logger: e.log, Plugins: o.plugins,
		Records: o.records, Timers: o.timers, Completions: o.completions, Policy: o.policy, Observer: o.observer}
	if o.pg != nil {
		cfg.Postgres, cfg.Partitions = o.pg.PluginSQL(), o.pg.Partitions()
	}
	h, err := host.New(cfg)
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
	return h, nil
}

func stopHost(h *host.Host) {
	h.Stop()
	h.Close(context.Background())
}

// waitFor polls cond every step until it holds or d passes.
func waitFor(ctx context.Context, d, step time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleepCtx(ctx, step)
	}
	return true
}

// keyEvent is one keyspace notification: the key it names and when it
// arrived.
type keyEvent struct {
	key string
	at  time.Time
}

// watchKeyspace turns on notify-keyspace-events flags on the bench
// server (off again by stop), subscribes a client of its own to the
// keyspace channels of db matching pattern, and sends every notification
// of operation op on the returned channel (buffered buf). stop ends the
// subscription and restores the flags.
func (e *benchEnv) watchKeyspace(ctx context.Context, db int, flags, pattern, op string, buf int) (<-chan keyEvent, func(), error) {
	raw := e.stats.Raw()
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", flags).Build()).Error(); err != nil {
		return nil, nil, err
	}
	restore := func() {
		raw.Do(context.WithoutCancel(ctx), raw.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", "").Build())
	}
	opt, err := vk.ParseURL(e.vsrv.URL())
	if err != nil {
		restore()
		return nil, nil, err
	}
	opt.DisableCache = true
	sub, err := vk.NewClient(opt)
	if err != nil {
		restore()
		return nil, nil, err
	}
	events := make(chan keyEvent, buf)
	subCtx, cancel := context.WithCancel(ctx)
	prefix := fmt.Sprintf("__keyspace@%d__:", db)
	go func() {
		_ = sub.Receive(subCtx, sub.B().Psubscribe().Pattern(prefix+pattern).Build(), func(msg vk.PubSubMessage) {
			if msg.Message == op {
				events <- keyEvent{key: strings.TrimPrefix(msg.Channel, prefix), at: time.Now()}
			}
		})
	}()
	return events, func() { cancel(); sub.Close(); restore() }, nil
}
