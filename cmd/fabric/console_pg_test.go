package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/internal/admin"
)

// TestConsolePostgresRun runs `fabric run --backend postgres` (its own
// throwaway cluster, the demo workload) and reads its console: the URL
// it prints, lanes and executions of the demo, an execution's detail
// through the CLI, and a write refused without the admin token.
func TestConsolePostgresRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Postgres cluster")
	}
	out := &syncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	exited := make(chan int)
	go func() {
		exited <- runCLI(ctx, &cliEnv{stdout: out, stderr: out}, []string{"run", "--backend", "postgres", "--plugins", "",
			"--admin-addr", "127.0.0.1:0", "--rate", "20", "--mix", "immediate=100", "--lanes", "pg-console", "--drain-timeout", "20s"})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("fabric run exited %d\n%s", code, out)
			}
		case <-time.After(90 * time.Second):
			t.Errorf("fabric run did not stop\n%s", out)
		}
	})
	var base string
	re := regexp.MustCompile(`console: (http://\S+)/ui/ \(read-only`)
	valkeytest.Eventually(t, 3*time.Minute, "fabric run --backend postgres prints the console URL", func() bool {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			return true
		}
		return false
	})
	var page admin.ExecutionPage
	valkeytest.Eventually(t, 30*time.Second, "the demo's executions are listed", func() bool {
		resp, err := http.Get(base + "/api/executions?lane=pg-console&limit=5")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		page = admin.ExecutionPage{}
		return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&page) == nil && len(page.Executions) > 0
	})
	id := page.Executions[0].ID
	code, stdout, stderr := runCmd(t, "executions", "show", id, "--admin", base)
	if code != 0 || !strings.Contains(stdout, "execution "+id) || !strings.Contains(stdout, "lane_id: pg-console") {
		t.Fatalf("show on postgres: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCmd(t, "lanes", "--admin", base)
	if code != 0 || !strings.Contains(stdout, "pg-console") {
		t.Fatalf("lanes on postgres: %d\n%s", code, stdout)
	}
	code, _, stderr = runCmd(t, "executions", "cancel", id, "--admin", base)
	if code != 1 || !strings.Contains(stderr, "403") {
		t.Fatalf("cancel without a token on postgres: %d %s", code, stderr)
	}
	resp, err := http.Get(base + "/status")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/status: %v %v", resp, err)
	}
	resp.Body.Close()
}
