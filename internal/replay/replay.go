package replay

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/host/partlease"
	"github.com/fabric-host/fabric/lua"
)

// Config configures Run.
type Config struct {
	// Wasm is the plugin file to replay.
	Wasm string
	// Case is the recorded partition.
	Case *Case
	// CacheDir is the compilation cache ("" = in memory).
	CacheDir string
	// Plugin overrides the plugin's manifest values (config entries).
	Plugin host.PluginConfig
	// Timeout bounds the replay (default 2 minutes).
	Timeout time.Duration
	// Logger receives the host's logs (default: discarded).
	Logger *slog.Logger
}

// Result is what one replay did.
type Result struct {
	// Plugin and Version name the plugin replayed.
	Plugin, Version string
	// Actions are the plugin's FCALLs and writes on the case's partition,
	// each with its reply, sorted (see recordingStore.lines).
	Actions []string
	// Diff is the keyspace difference the sweep made (Diff's format).
	Diff []string
	// Scan is the plugin's own account of the partition's call.
	Scan abi.ScanResult
}

// Write prints the result; two replays of one case print the same bytes.
func (r *Result) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "plugin %s %s\n", r.Plugin, r.Version)
	fmt.Fprintf(&b, "scan scanned=%d acted=%d skipped=%d errors=%d\n", r.Scan.Scanned, r.Scan.Acted, r.Scan.Skipped, r.Scan.Errors)
	fmt.Fprintf(&b, "actions %d\n", len(r.Actions))
	for _, a := range r.Actions {
		b.WriteString("  " + a + "\n")
	}
	fmt.Fprintf(&b, "keyspace changes %d\n", len(r.Diff))
	for _, d := range r.Diff {
		b.WriteString("  " + d + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Run replays cfg.Wasm on cfg.Case: a private server holding the case's
// keys and the Functions libraries with their clock fixed at the case's
// time, a host running only this plugin (granted what its manifest asks:
// it can reach nothing but the private server) for one sweep, with the
// plugin's clock fixed. The host's guests read WASI clocks and randomness
// that wazero makes deterministic already (no system clock or entropy is
// configured for them).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Case == nil {
		return nil, errors.New("replay: no case")
	}
	if err := cfg.Case.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	cs := cfg.Case

	in, err := host.Inspect(ctx, cfg.Wasm, host.InspectConfig{CacheDir: cfg.CacheDir})
	if err != nil {
		return nil, fmt.Errorf("replay: %s: %w", cfg.Wasm, err)
	}
	man := in.Manifest
	part, _ := ParsePartition(cs.Tag, cs.Partitions) // Validate parsed it
	if man.PartitionFamily() != part.Family {
		return nil, fmt.Errorf("replay: %s sweeps %s partitions; the case is of %s", man.Name, man.PartitionFamily(), cs.Tag)
	}

	srv, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("replay: private server: %w", err)
	}
	defer srv.Stop()
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: srv.URL(), Partitions: cs.Partitions, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("replay: dial private server: %w", err)
	}
	defer vc.Close()
	raw := vc.Raw()
	if err := loadFrozenLibraries(ctx, raw, cs.ServerTimeMs); err != nil {
		return nil, err
	}
	if err := restore(ctx, raw, cs); err != nil {
		return nil, err
	}
	before, err := Snapshot(ctx, raw)
	if err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp("", "fabric-replay-")
	if err != nil {
		return nil, fmt.Errorf("replay: plugin dir: %w", err)
	}
	defer os.RemoveAll(dir)
	b, err := os.ReadFile(cfg.Wasm)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, man.Name+".wasm"), b, 0o600); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}

	rec := &recordingStore{PluginStore: valkey.PluginStore{C: vc}, tag: cs.Tag}
	swept := &sweepWaiter{plugin: man.Name, done: make(chan host.SweepEvent, 1)}
	pc := cfg.Plugin
	pc.Interval = time.Hour // one sweep: the next is an hour away
	now := cs.ServerTimeMs
	h, err := host.New(host.Config{
		PluginDir: dir, CacheDir: cfg.CacheDir, Backend: vc, Store: rec,
		Now:        func(context.Context) (int64, error) { return now, nil },
		Logger:     cfg.Logger,
		Partitions: cs.Partitions,
		Plugins:    map[string]host.PluginConfig{man.Name: pc},
		Policy:     &host.Policy{Plugins: map[string]host.Grant{man.Name: host.GrantOf(man)}},
		Timers:     host.TimerConfig{Disabled: true},
		Leases:     partlease.Config{Disabled: true},
		Observer:   swept,
		PoolSize:   1,
	})
	if err != nil {
		return nil, fmt.Errorf("replay: host: %w", err)
	}
	defer h.Close(context.Background())
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("replay: host: %w", err)
	}
	var sweep host.SweepEvent
	select {
	case sweep = <-swept.done:
	case <-ctx.Done():
		h.Stop()
		st, _ := h.Plugin(man.Name)
		return nil, fmt.Errorf("replay: %s did not finish a sweep within %s (state %s: %s)", man.Name, cfg.Timeout, st.State, st.Reason)
	}
	res := &Result{Plugin: man.Name, Version: sweep.Version, Actions: rec.lines()}
	for _, r := range h.Records(man.Name) { // before Stop unloads the plugin
		if r.Partition == int(part.Index) {
			res.Scan = r.Result
		}
	}
	h.Stop()
	after, err := Snapshot(ctx, raw)
	if err != nil {
		return nil, err
	}
	res.Diff = Diff(before, after)
	return res, nil
}

// loadFrozenLibraries loads both Functions libraries with every
// redis.call('TIME') answering the case's time.
func loadFrozenLibraries(ctx context.Context, c vk.Client, ms int64) error {
	frozen := fmt.Sprintf("{'%d', '%d'}", ms/1000, (ms%1000)*1000)
	for _, src := range []string{lua.Source(), lua.FabricSource()} {
		if !strings.Contains(src, "redis.call('TIME')") {
			return errors.New("replay: the library reads the clock in a way replay cannot fix (no redis.call('TIME'))")
		}
		src = strings.ReplaceAll(src, "redis.call('TIME')", frozen)
		if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(src).Build()).Error(); err != nil {
			return fmt.Errorf("replay: load library with a fixed clock: %w", err)
		}
	}
	return nil
}

// restore writes the case's keys (RESTORE, pipelined).
func restore(ctx context.Context, c vk.Client, cs *Case) error {
	const chunk = 256
	for i := 0; i < len(cs.Keys); i += chunk {
		part := cs.Keys[i:min(i+chunk, len(cs.Keys))]
		cmds := make(vk.Commands, 0, len(part))
		for _, k := range part {
			d, err := base64.StdEncoding.DecodeString(k.Dump)
			if err != nil {
				return fmt.Errorf("replay: key %s: %w", k.Name, err)
			}
			cmds = append(cmds, c.B().Restore().Key(k.Name).Ttl(k.PTTLMs).SerializedValue(string(d)).Replace().Build())
		}
		for j, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("replay: restore %s: %w", part[j].Name, err)
			}
		}
	}
	return nil
}

// recordingStore passes every host-function call through to the private
// server and notes the writes (FCALLs and write ops) on the case's
// partition.
type recordingStore struct {
	valkey.PluginStore
	tag string

	mu      sync.Mutex
	actions []string
}

func (s *recordingStore) FCallBatch(ctx context.Context, calls []abi.Call) []abi.CallResult {
	res := s.PluginStore.FCallBatch(ctx, calls)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range calls {
		if !s.mine(c.Keys) {
			continue
		}
		var reply string
		switch res[i].Result {
		case abi.StatusLuaError:
			le := &valkey.LuaError{Function: c.Function, Code: valkey.ErrorCode(res[i].Status), Details: res[i].Fields}
			reply = "error " + strconv.Quote(le.Error())
		case abi.StatusError:
			reply = "error " + strconv.Quote(res[i].Status)
		case abi.StatusOK:
			reply = res[i].Status + " " + quoteAll(res[i].Fields)
		}
		s.actions = append(s.actions, fmt.Sprintf("fcall %s keys=%s args=%s -> %s", c.Function, quoteAll(c.Keys), quoteAll(c.Args), reply))
	}
	return res
}

func (s *recordingStore) Write(ctx context.Context, req *abi.CommandRequest) (int64, error) {
	n, err := s.PluginStore.Write(ctx, req)
	if s.mine([]string{req.Key}) {
		reply := strconv.FormatInt(n, 10)
		if err != nil {
			reply = "error " + strconv.Quote(err.Error())
		}
		s.mu.Lock()
		s.actions = append(s.actions, fmt.Sprintf("write %s %q args=%s -> %s", req.Op, req.Key, quoteAll(req.Args), reply))
		s.mu.Unlock()
	}
	return n, err
}

func (s *recordingStore) mine(keys []string) bool {
	for _, k := range keys {
		if abi.HashTag(k) == s.tag {
			return true
		}
	}
	return false
}

// lines returns the actions sorted: the order a plugin meets the members
// of a set (SSCAN) follows the server process's hash seed, which differs
// between two replays.
func (s *recordingStore) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]string(nil), s.actions...)
	sort.Strings(out)
	return out
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, " ") + "]"
}

// sweepWaiter hands over the plugin's first finished sweep.
type sweepWaiter struct {
	plugin string
	once   sync.Once
	done   chan host.SweepEvent
}

func (w *sweepWaiter) SweepDone(ev host.SweepEvent) {
	if ev.Plugin == w.plugin {
		w.once.Do(func() { w.done <- ev })
	}
}

// Compare lists the actions in which candidate differs from base, two
// replays of one case: "- ACTION" for one only base took, "+ ACTION" for
// one only candidate would take.
func Compare(base, candidate *Result) []string {
	return Diff(base.Actions, candidate.Actions)
}
