package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"time"
)

// runGoBench runs the repository's Go benchmarks (host, plugins, SDK) and
// returns their output lines.
func runGoBench(ctx context.Context, e *benchEnv) string {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", ".", "-benchtime", e.size.GoBenchTime, "-count", "1",
		"./host/", "./plugins/...")
	cmd.Dir = e.repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var keep []string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "ok") || strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "---") {
			keep = append(keep, line)
		}
	}
	if err != nil {
		keep = append(keep, "go test: "+err.Error())
	}
	return strings.Join(keep, "\n")
}
