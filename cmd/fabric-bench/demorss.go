package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// demoRSS is what the demo-workload row reads of a `fabric run` process
// at the end of its window.
type demoRSS struct {
	// RSSKiB is the mean of VmRSS sampled every second over the last
	// third of the window (the plugins' sweeps, every 5 to 60 s, line up
	// at whole minutes: one sample would catch them all at once or none);
	// MinKiB and MaxKiB bound the samples.
	RSSKiB, MinKiB, MaxKiB, HWMKiB int64
	Split                          rssBreakdown
	// Plugins running, instances they hold, idle releases so far, calls.
	Running, Instances int
	Releases, Calls    int64
}

// runDemoRSS runs bin/fabric run as `make run` does (its private server,
// every plugin of bin/plugins, the demo workload in the same process,
// the shared compilation cache) for window, then reads the process's
// resident set (/proc/PID/status, /proc/PID/smaps), its Go runtime's
// memory (/metrics) and its plugins' instances (/plugins), and stops it.
func (e *benchEnv) runDemoRSS(ctx context.Context, window time.Duration) (*demoRSS, error) {
	fabric := filepath.Join(e.repo, "bin", "fabric")
	if _, err := os.Stat(fabric); err != nil {
		return nil, fmt.Errorf("bin/fabric is not built (make build): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(fabric, "run", "--view", "off", "--admin-addr", addr, "--drain-timeout", "5s")
	cmd.Dir = e.repo
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var tail strings.Builder
	cmd.Stdout, cmd.Stderr = discard{}, &limitedWriter{b: &tail, n: 4096}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	pid := cmd.Process.Pid
	// The window starts once the host answers (its plugins loaded).
	if err := waitReady(ctx, "http://"+addr+"/readyz", exited, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("fabric run: %w: %s", err, lastLines([]byte(tail.String()), 5))
	}
	r := &demoRSS{}
	status := fmt.Sprintf("/proc/%d/status", pid)
	start := time.Now()
	var sum, n int64
	for t := time.Second; t <= window; t += time.Second {
		select {
		case <-time.After(time.Until(start.Add(t))):
		case err := <-exited:
			exited <- err
			return nil, fmt.Errorf("fabric run exited during the window: %v: %s", err, lastLines([]byte(tail.String()), 5))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if t < window-window/3 {
			continue
		}
		kib := procStatusOf(status, "VmRSS:")
		if n == 0 || kib < r.MinKiB {
			r.MinKiB = kib
		}
		r.MaxKiB = max(r.MaxKiB, kib)
		sum += kib
		n++
	}
	r.RSSKiB, r.HWMKiB = sum/max(n, 1), procStatusOf(status, "VmHWM:")
	goKiB, heapKiB, err := goRuntimeOf("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	r.Split = readRSSBreakdownOf(fmt.Sprintf("/proc/%d/smaps", pid), goKiB, heapKiB)
	var plugins []struct {
		State        string `json:"state"`
		Instances    int    `json:"instances"`
		IdleReleases int64  `json:"idle_releases"`
		Calls        int64  `json:"calls"`
	}
	if err := getJSON("http://"+addr+"/plugins", &plugins); err != nil {
		return nil, err
	}
	for _, p := range plugins {
		if p.State == "running" {
			r.Running++
		}
		r.Instances += p.Instances
		r.Releases += p.IdleReleases
		r.Calls += p.Calls
	}
	return r, nil
}

// waitReady polls url until it answers 200, the process exits or limit
// passes.
func waitReady(ctx context.Context, url string, exited chan error, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("exited before ready: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s", limit)
		}
	}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// goRuntimeOf reads a process's Go runtime memory from its Prometheus
// metrics: resident (sys minus released) and heap objects, in KiB.
func goRuntimeOf(url string) (goKiB, heapKiB int64, err error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	v := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			v[name] = f
		}
	}
	sys, ok := v["go_memstats_sys_bytes"]
	if !ok {
		return 0, 0, fmt.Errorf("%s: no go_memstats_sys_bytes", url)
	}
	return int64(sys-v["go_memstats_heap_released_bytes"]) >> 10, int64(v["go_memstats_heap_alloc_bytes"]) >> 10, nil
}

// procStatusOf reads a kB field of a /proc/PID/status file.
func procStatusOf(path, field string) int64 {
	b, err := os.ReadFile(path)
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
