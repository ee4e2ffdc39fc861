package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// TestMain shares one real server among the package's tests (the demo
// test needs one) and stops it at the end.
func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

// TestRunWorkload runs every work kind for a moment and checks that the
// drain leaves nothing unfinished.
func TestRunWorkload(t *testing.T) {
	t.Parallel()
	vc := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 60*time.Second)
	if err := vc.InstallWaitpointHMACSecret(ctx, "0123456789abcdef0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum, err := runWorkload(ctx, vc, workloadConfig{Duration: 1500 * time.Millisecond, Rate: 60, Workers: 2,
		Concurrency: 4, Report: 500 * time.Millisecond, PromoteInline: true, ResolveInline: true,
		Mix: map[string]int{kindImmediate: 1, kindDelayed: 1, kindRetry: 1, kindSuspend: 1, kindDAG: 1}}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if sum.Unfinished != 0 || sum.Executions == 0 || sum.Terminal["completed"] != sum.Executions {
		t.Fatalf("summary: %s", sum)
	}
	// A slow machine may submit only a dozen items, none of them a retry.
	if !strings.Contains(out.String(), "completed") || (sum.Submitted[kindRetry] > 0 && sum.Workers.Retried == 0) {
		t.Fatalf("output:\n%s\nsummary: %s", out.String(), sum)
	}
}

func TestParseMix(t *testing.T) {
	t.Parallel()
	m, err := parseMix("immediate=3, dag=1")
	if err != nil || m[kindImmediate] != 3 || m[kindDAG] != 1 || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"nope=1", "immediate", "immediate=-1", "delayed=x"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if code, _, _ := runCmd(t, "demo", "--mix", "immediate=0"); code != 2 {
		t.Errorf("zero mix: exit %d", code)
	}
}
