package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/host"
)

// TestSmoke builds the bench program and runs every scenario at its smoke
// size (seconds each) to prove it works end to end: servers, peers (asynq,
// River), host children and the report. Numbers are never asserted. The
// program runs as a normal (non-race) binary: under the race detector its
// plugin hosts would measure nothing useful and take minutes on 2 cores.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and builds bench/peers")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bin/plugins/delayed_promoter.wasm", "bin/plugins/dependency.wasm", "bin/plugins/pg_dependency_reconciler.wasm", "bin/plugins/pg_delayed_promoter.wasm", "testdata/plugins/swap_v1.wasm", "testdata/plugins/swap_v2.wasm"} {
		if _, err := os.Stat(filepath.Join(repo, f)); err != nil {
			t.Fatalf("%s is missing: run `make plugins` first", f)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fabric-bench")
	build := exec.Command("go", "build", "-o", bin, ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	out := filepath.Join(dir, "BENCHMARKS.md")
	cmd := exec.Command(bin, "-size", "smoke", "-repo", repo, "-out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Log(stdout.String())
	if err != nil {
		t.Fatalf("fabric-bench: %v: %s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, def := range scenarios {
		head := fmt.Sprintf("## %d. %s", def.id, def.title)
		if !strings.Contains(report, head) {
			t.Errorf("report lacks %q", head)
		}
	}
	for _, want := range []string{"**Machine:**", "| measure | fabric | comparison |", "asynq", "River", "raw LPUSH/BRPOP", "PING"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(report, "**Failed:**") {
		t.Errorf("a scenario failed:\n%s", report)
	}
}

func TestMissedCycles(t *testing.T) {
	t.Parallel()
	// Built in swap.go's terms: 3 partitions, sweeps 1..4 (4 partial).
	recs := records(map[uint64][]int{1: {1, 2}, 2: {0, 1, 2}, 3: {0, 1, 1}, 5: {0}})
	missed, checked := missedCycles(recs, 3)
	// sweep 3: partition 2 missing and 1 doubled (2); sweep 4 missing (3).
	if missed != 5 || checked != 2 {
		t.Fatalf("missed, checked = %d, %d; want 5, 2", missed, checked)
	}
}

func TestFmtNum(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{123456, "/s", "123 k/s"}, {12345, "/s", "12.3 k/s"}, {512, "ms", "512 ms"}, {1.234, "ms", "1.23 ms"}, {0.0456, "ms", "0.046 ms"}, {nan(), "ms", "–"},
	} {
		if got := fmtNum(c.v, c.unit); got != c.want {
			t.Errorf("fmtNum(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}

func records(by map[uint64][]int) []host.CycleRecord {
	var out []host.CycleRecord
	for c, ps := range by {
		for _, p := range ps {
			out = append(out, host.CycleRecord{Cycle: c, Partition: p})
		}
	}
	return out
}
