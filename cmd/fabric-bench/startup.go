package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/fabric-host/fabric/host"
)

// runStartup measures what a newcomer waits for (issue 20): the stock
// plugin set compiled with an empty compilation cache, and `make run` to
// its first status line on a warm machine with nothing changed.
func runStartup(ctx context.Context, e *benchEnv, sc *Scenario) error {
	stock := filepath.Join(e.repo, "bin", "plugins")
	dir := stock
	if e.size.Plugins != nil {
		files, err := e.defaultPlugins()
		if err != nil {
			return err
		}
		if dir, err = pluginDir(files...); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	wasm, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	if len(wasm) == 0 {
		return fmt.Errorf("no plugins in %s: run `make plugins`", dir)
	}
	sc.Size = fmt.Sprintf("%d plugin files (%s)", len(wasm), strings.TrimPrefix(dir, e.repo+"/"))
	// The warm rows first (the goal's own measure; a cold compile on a
	// loaded machine may take the rest of the scenario's time).
	var warmRows []Row
	if e.size.Plugins == nil {
		rows, err := e.startupRuns(ctx)
		if err != nil {
			return err
		}
		warmRows = rows
	} else {
		sc.Notes = append(sc.Notes, "smoke size: `make run` rows are measured at full size only")
	}
	// The shared cache holds the set (as after `make plugins`).
	warm, err := e.hostChild(ctx, dir, 0)
	if err != nil {
		return fmt.Errorf("warm load: %w", err)
	}
	warmLoad := Row{Measure: "warm load of the stock set (cache filled)", Fabric: warm.StartMs / 1000, Unit: "s",
		Peer: nan(), Note: fmt.Sprintf("the same host process with the compilation cache holding every module; CPU time at Started %.1f s (the process's, start-up included)", warm.StartCPUMs/1000)}

	cold, err := os.MkdirTemp("", "fabric-bench-cold-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cold)
	r, err := e.hostChildCache(ctx, dir, cold, 0)
	if err != nil {
		return fmt.Errorf("cold compile: %w", err)
	}
	row := Row{Measure: "cold compile of the stock set (empty cache)", Fabric: r.StartMs / 1000, Unit: "s", Goal: "≤ 20 s",
		Peer: nan(), Note: fmt.Sprintf("a host process on Valkey loading %d files from an empty compilation cache: Host.Start to Started (every file loaded or rejected; compiled %d at a time, the Postgres plugins' manifests read without compiling them); %d plugins, %d running; CPU time at Started %.1f s (the work, whatever the machine's load: on %d idle cores ≈ %.1f s)",
			len(wasm), runtime.NumCPU(), r.Plugins, r.Running, r.StartCPUMs/1000, runtime.NumCPU(), r.StartCPUMs/1000/float64(runtime.NumCPU()))}
	// The comparison: every file compiled, one after the other, as the
	// host's load did before (host.Inspect, into another empty cache), in
	// what time the scenario has left.
	seq, err := os.MkdirTemp("", "fabric-bench-seq-cache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(seq)
	t0 := time.Now()
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	row.Versus = "every file compiled one at a time"
	for _, f := range wasm {
		if _, err := host.Inspect(ctx, f, host.InspectConfig{CacheDir: seq}); err != nil {
			row.Versus += fmt.Sprintf(" (not measured: %s: %v)", filepath.Base(f), err)
			break
		}
	}
	if !strings.Contains(row.Versus, "not measured") {
		row.Peer = time.Since(t0).Seconds()
		var ru1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		row.Note += fmt.Sprintf("; one at a time: CPU time %.1f s", cpu.Seconds())
	}
	sc.Rows = append(append(sc.Rows, row, warmLoad), warmRows...)
	sc.Notes = append(sc.Notes, "Cold compile: the bench binary re-executed as a host process (as in scenario 7) with a fresh, empty cache directory. "+
		"`make run` rows: the command is run in the repository with --view lines (its output is a pipe) and an ephemeral admin port, timed to the first `status` line, then stopped with SIGINT.")
	return nil
}

// startupRuns times `make run` and `fabric run` to their first status
// line, with nothing changed.
func (e *benchEnv) startupRuns(ctx context.Context) ([]Row, error) {
	fabric := filepath.Join(e.repo, "bin", "fabric")
	// Nothing changed: what `make run` would build or prewarm is done
	// first, untimed (as a previous `make run` leaves it).
	pre := exec.CommandContext(ctx, "make", "build", "plugins")
	pre.Dir = e.repo
	pre.Env = append(os.Environ(), "FABRIC_PREWARM_TESTS=0", "FABRIC_PREWARM_BACKEND=valkey")
	if out, err := pre.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make build plugins: %w: %s", err, lastLines(out, 5))
	}
	mk, err := firstStatus(ctx, e.repo, "make", "run", "RUN_ARGS=--view lines --admin-addr 127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("make run: %w", err)
	}
	fr, err := firstStatus(ctx, e.repo, fabric, "run", "--view", "lines", "--admin-addr", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fabric run: %w", err)
	}
	return []Row{
		{Measure: "`make run` to the first status line (warm, nothing changed)", Fabric: mk.status.Seconds(), Unit: "s", Goal: "≤ 20 s",
			Peer: nan(), Note: fmt.Sprintf("`make run` started to its first status line on stdout (make's deps, go build of bin/fabric finding it up to date, the plugins script finding nothing stale or uncompiled, then `fabric run`: private server, library, host load, demo): "+
				"`fabric run` started after %s, its host loaded after %s", round(mk.run), round(mk.host))},
		{Measure: "`fabric run` to the first status line (warm)", Fabric: fr.status.Seconds(), Unit: "s",
			Peer: nan(), Note: fmt.Sprintf("bin/fabric run alone (what `make run` runs once everything is built): host loaded after %s", round(fr.host))},
	}, nil
}

func round(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }

// startTimes are the milestones of a run's output, from its start.
type startTimes struct {
	run, host, status time.Duration
}

// firstStatus runs name args in dir (its own process group), times its
// output's milestones until the status view's first line, then stops it
// with SIGINT (the drain) and waits for it.
func firstStatus(ctx context.Context, dir, name string, args ...string) (startTimes, error) {
	var st startTimes
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return st, err
	}
	var tail strings.Builder
	cmd.Stderr = &limitedWriter{b: &tail, n: 4096}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return st, err
	}
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "fabric ") && strings.Contains(line, " on ") && st.run == 0:
				st.run = time.Since(t0)
			case strings.HasPrefix(line, "host: ") && st.host == 0:
				st.host = time.Since(t0)
			case strings.HasPrefix(line, "status "):
				st.status = time.Since(t0)
				found <- nil
				_, _ = bufio.NewReader(out).WriteTo(discard{}) // drain the rest until exit
				return
			}
		}
		found <- errors.New("exited before its first status line")
	}()
	select {
	case err = <-found:
	case <-ctx.Done():
		err = ctx.Err()
	}
	stop()
	if err != nil {
		return st, fmt.Errorf("%w: %s", err, lastLines([]byte(tail.String()), 5))
	}
	return st, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// limitedWriter keeps the first n bytes written.
type limitedWriter struct {
	b *strings.Builder
	n int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if rest := w.n - w.b.Len(); rest > 0 {
		w.b.Write(p[:min(len(p), rest)])
	}
	return len(p), nil
}
