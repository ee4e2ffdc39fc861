package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
)

// TestRunOnCluster runs `fabric run --valkey-url valkey+cluster://...` with
// the demo workload (every work kind, SDK workers, no plugins: the workers
// promote and resolve inline) on a 3-primary cluster: it must bootstrap
// every primary, finish every execution it submitted and count them from
// the keyspace of all three nodes.
func TestRunOnCluster(t *testing.T) {
	t.Parallel()
	cl := valkeytest.SharedCluster(t)
	code, out, errOut := runCmd(t, "run", "--valkey-url", cl.URL(), "--plugins", "", "--admin-addr", "127.0.0.1:0",
		"--view", "lines", "--refresh", "500ms", "--census-interval", "500ms", "--duration", "3s", "--drain-timeout", "60s",
		"--rate", "40", "--mix", "immediate=2,delayed=1,retry=1,suspend=1,dag=1",
		"--partitions", "flow=8,budget=2,quota=2", "--waitpoint-hmac-secret", "00112233445566778899aabbccddeeff")
	if code != 0 {
		t.Fatalf("fabric run on the cluster: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "flowfabric library 34 loaded") {
		t.Fatalf("no library line:\n%s", out)
	}
	m := regexp.MustCompile(`executions by state: (.*)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no state counts:\n%s", out)
	}
	done := regexp.MustCompile(`^completed=(\d+)$`).FindStringSubmatch(m[1])
	if done == nil || done[1] == "0" {
		t.Fatalf("every execution must end completed; states: %s\n%s\nstderr:\n%s", m[1], out, errOut)
	}
	if !strings.Contains(out, "; unfinished 0;") {
		t.Fatalf("the demo left executions unfinished:\n%s", out)
	}
	t.Logf("%s", m[0])
}
