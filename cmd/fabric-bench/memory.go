package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/host"
)

// childEnv names the child mode: the bench program re-executes itself so
// the host's RSS is measured in a process of its own.
const childEnv = "FABRIC_BENCH_CHILD"

func isChild() bool { return os.Getenv(childEnv) == "host" }

// childResult is what a host child prints.
type childResult struct {
	RSSKiB  int64 `json:"rss_kib"`
	HWMKiB  int64 `json:"hwm_kib"`
	Plugins int   `json:"plugins"`
	Running int   `json:"running"`
	Calls   int64 `json:"calls"`
	HeapKiB int64 `json:"heap_kib"`
	// Split is where the resident set is, at the end of the window.
	Split rssBreakdown `json:"split"`
	// Resident is each plugin's machine code and idle linear memory
	// resident at the end of the window (host.Host.Resident).
	Resident []host.PluginResident `json:"resident"`
	// StartMs is the wall time from Host.Start to Started (every plugin
	// of the directory loaded or rejected): a cold compile when the cache
	// was empty.
	StartMs float64 `json:"start_ms"`
	// StartCPUMs is the process's CPU time (user and system) at Started:
	// the load's work, whatever the machine's load.
	StartCPUMs float64 `json:"start_cpu_ms"`
}

// runChild runs a host on -plugins over -url/-db for -hold, then prints
// its resident set.
func runChild(args []string) int {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	url := fs.String("url", "", "server URL")
	db := fs.Int("db", 0, "logical database")
	dir := fs.String("plugins", "", "plugin directory")
	cache := fs.String("cache", "", "compilation cache")
	hold := fs.Duration("hold", 3*time.Second, "how long the host runs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	vc, err := valkey.Dial(ctx, valkey.ClientConfig{URL: *url, DB: *db, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer vc.Close()
	if err := vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h, err := host.New(host.Config{PluginDir: *dir, CacheDir: *cache, Backend: vc, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	t0 := time.Now()
	if err := h.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-h.Started()
	started := time.Since(t0)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	time.Sleep(*hold) // the measured window: the host runs its plugins
	r := childResult{StartMs: float64(started.Microseconds()) / 1000, StartCPUMs: float64(cpu.Microseconds()) / 1000}
	for _, p := range h.Plugins() {
		r.Plugins++
		if p.State == host.StateRunning {
			r.Running++
		}
		r.Calls += p.Calls
	}
	r.RSSKiB, r.HWMKiB = procStatus("VmRSS:"), procStatus("VmHWM:")
	r.Split = readRSSBreakdown()
	r.Resident = h.Resident()
	if prof := os.Getenv("FABRIC_BENCH_HEAPPROFILE"); prof != "" {
		writeHeapProfile(prof)
	}
	// FABRIC_BENCH_SMAPS names a file for a copy of the child's smaps (a
	// diagnostic, like FABRIC_BENCH_HEAPPROFILE).
	if dump := os.Getenv("FABRIC_BENCH_SMAPS"); dump != "" {
		if b, err := os.ReadFile("/proc/self/smaps"); err == nil {
			_ = os.WriteFile(dump, b, 0o644)
		}
	}
	stopHost(h)
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

// procStatus reads a kB field of /proc/self/status.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// hostChild runs the bench binary as a host child on dir.
func (e *benchEnv) hostChild(ctx context.Context, dir string, hold time.Duration) (*childResult, error) {
	return e.hostChildCache(ctx, dir, e.cache, hold)
}

// hostChildCache is hostChild with the compilation cache cache.
func (e *benchEnv) hostChildCache(ctx context.Context, dir, cache string, hold time.Duration) (*childResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-url", e.vsrv.URL(), "-db", strconv.Itoa(e.freshDB()), "-plugins", dir,
		"-cache", cache, "-hold", hold.String())
	cmd.Env = append(os.Environ(), childEnv+"=host")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("host child: %w: %s", err, lastLines(stderr.Bytes(), 5))
	}
	var r childResult
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return nil, fmt.Errorf("host child: decode %q: %w", out, err)
	}
	return &r, nil
}

// runMemory measures the resident set of a host process running the
// default plugin set (bin/plugins, what `fabric run` loads) on an idle
// deployment, beside the same host with no plugins and an idle asynq
// server process.
func runMemory(ctx context.Context, e *benchEnv, sc *Scenario) error {
	files, err := e.defaultPlugins()
	if err != nil {
		return err
	}
	if err := e.prewarm(ctx, files...); err != nil {
		return err
	}
	dir, err := pluginDir(files...)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	empty, err := pluginDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(empty)
	hold := e.size.IdleHold
	sc.Size = fmt.Sprintf("%d plugins, %s running after the initial load", len(files), hold)
	full, err := e.hostChild(ctx, dir, hold)
	if err != nil {
		return err
	}
	bare, err := e.hostChild(ctx, empty, hold)
	if err != nil {
		return err
	}
	mib := func(k int64) float64 { return float64(k) / 1024 }
	row := Row{Measure: fmt.Sprintf("host RSS, %d plugins loaded and running", full.Plugins), Fabric: mib(full.RSSKiB), Unit: "MiB", Goal: "≤ 150 MiB",
		Versus: "asynq idle server process", Peer: nan(),
		Note: fmt.Sprintf("peak (VmHWM) %s; %d of %d plugins running, %d partition calls in the window", fmtNum(mib(full.HWMKiB), "MiB"), full.Running, full.Plugins, full.Calls) +
			fmt.Sprintf("; resident: machine code %s (in files %s, anonymous %s), Go runtime %s (heap objects %s), guest memories and other anonymous %s, the host binary and other files %s",
				fmtNum(mib(full.Split.CodeFileKiB+full.Split.CodeKiB), "MiB"), fmtNum(mib(full.Split.CodeFileKiB), "MiB"), fmtNum(mib(full.Split.CodeKiB), "MiB"),
				fmtNum(mib(full.Split.GoKiB), "MiB"), fmtNum(mib(full.Split.GoHeapKiB), "MiB"),
				fmtNum(mib(full.Split.OtherAnonKiB), "MiB"), fmtNum(mib(full.Split.FileKiB), "MiB"))}
	pr, err := e.peer(ctx, "asynq-idle", "-socket", e.vsrv.Socket(), "-db", strconv.Itoa(e.freshDB()), "-hold", hold.String())
	if err != nil {
		row.Note += "; asynq failed: " + err.Error()
	} else {
		row.Versus, row.Peer = "asynq "+pr.Version+" idle server process", mib(pr.RSSKiB)
	}
	demo := Row{Measure: "host RSS, the full default Valkey set under the demo workload", Unit: "MiB", Goal: "≤ 150 MiB",
		Versus: row.Versus, Peer: row.Peer}
	if d, err := e.runDemoRSS(ctx, e.size.DemoHold); err != nil {
		demo.Fabric, demo.Note = nan(), "not measured: "+err.Error()
	} else {
		demo.Fabric = mib(d.RSSKiB)
		demo.Note = fmt.Sprintf("bin/fabric run as `make run` runs it (its private server, every plugin of bin/plugins, the demo workload at its default rate in the same process) for %s after ready; VmRSS sampled every second over the window's last third: mean (the figure) %s, %s to %s; peak (VmHWM, the load included) %s; %d plugins running, %d partition calls, %d instances held at the end, %d released idle in the window",
			e.size.DemoHold, fmtNum(mib(d.RSSKiB), "MiB"), fmtNum(mib(d.MinKiB), "MiB"), fmtNum(mib(d.MaxKiB), "MiB"), fmtNum(mib(d.HWMKiB), "MiB"), d.Running, d.Calls, d.Instances, d.Releases) +
			fmt.Sprintf("; resident at the end: machine code %s (in files %s, anonymous %s), Go runtime %s (heap objects %s), guest memories and other anonymous %s, the host binary and other files %s",
				fmtNum(mib(d.Split.CodeFileKiB+d.Split.CodeKiB), "MiB"), fmtNum(mib(d.Split.CodeFileKiB), "MiB"), fmtNum(mib(d.Split.CodeKiB), "MiB"),
				fmtNum(mib(d.Split.GoKiB), "MiB"), fmtNum(mib(d.Split.GoHeapKiB), "MiB"),
				fmtNum(mib(d.Split.OtherAnonKiB), "MiB"), fmtNum(mib(d.Split.FileKiB), "MiB"))
	}
	n := max(1, full.Plugins)
	var code, mem int64
	var per []string
	for _, r := range full.Resident {
		code += r.CodeBytes
		mem += r.MemoryBytes
		per = append(per, fmt.Sprintf("%s %s + %s", r.Plugin, fmtNum(float64(r.CodeBytes)/(1<<20), "MiB"), fmtNum(float64(r.MemoryBytes)/(1<<20), "MiB")))
	}
	sc.Rows = append(sc.Rows, row, demo,
		Row{Measure: "host RSS, no plugins", Fabric: mib(bare.RSSKiB), Unit: "MiB", Versus: "", Peer: nan(),
			Note: "the same host process with an empty plugin directory: the plugins' share is the difference"},
		Row{Measure: "resident cost of one plugin (the set's share ÷ plugins)", Fabric: mib(full.RSSKiB-bare.RSSKiB) / float64(n), Unit: "MiB", Versus: "", Peer: nan(),
			Note: fmt.Sprintf("(%s − %s) ÷ %d; machine code resident %s of %s mapped (the rest is in a file the kernel pages in when executed), idle instances' linear memory %s (%d instances), the rest Go heap (decoded modules, cycle records) and runtime; per plugin, code + memory: %s",
				fmtNum(mib(full.RSSKiB), "MiB"), fmtNum(mib(bare.RSSKiB), "MiB"), n, fmtNum(float64(code)/(1<<20), "MiB"), fmtNum(float64(mapped(full.Resident))/(1<<20), "MiB"),
				fmtNum(float64(mem)/(1<<20), "MiB"), instances(full.Resident), strings.Join(per, ", "))})
	sc.Notes = append(sc.Notes, "Each host runs in a child process of its own (the bench binary re-executed) with a warm compilation cache; RSS is VmRSS at the end of the window.")
	return nil
}

func mapped(rs []host.PluginResident) (n int64) {
	for _, r := range rs {
		n += r.CodeMapped
	}
	return n
}

func instances(rs []host.PluginResident) (n int) {
	for _, r := range rs {
		n += r.Instances
	}
	return n
}
