package main

import (
	"os"
	"strings"
	"testing"
)

func TestMigrateCommand(t *testing.T) {
	t.Parallel()

	t.Run("List", func(t *testing.T) {
		code, out, _ := runCmd(t, "migrate", "--list")
		if code != 0 || !strings.Contains(out, "0001_initial") || !strings.Contains(out, "22  0022_worker_registry_event_pk") {
			t.Fatalf("code %d\n%s", code, out)
		}
	})

	t.Run("BadURLIsAClearError", func(t *testing.T) {
		code, _, errOut := runCmd(t, "migrate", "--postgres-url", "postgres://postgres@/x?host=/nonexistent/dir")
		if code != 1 || !strings.Contains(errOut, "nonexistent") {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
	})

	t.Run("ThrowawayClusterUpToTarget", func(t *testing.T) {
		// Without a URL the command migrates a throwaway cluster and removes
		// it; a low --target keeps this quick.
		code, out, errOut := runCmd(t, "migrate", "--target", "11")
		if code != 0 {
			t.Fatalf("code %d\n%s\n%s", code, out, errOut)
		}
		for _, want := range []string{"throwaway cluster", "0001_initial: applied", "0011_waitpoint_pending_extensions: applied", "schema at version 11 (11 applied"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		// "migrating throwaway cluster (pid N, DIR)": DIR must be gone.
		_, rest, _ := strings.Cut(out, "throwaway cluster (pid ")
		_, dir, _ := strings.Cut(rest, ", ")
		dir, _, _ = strings.Cut(dir, ")")
		if dir == "" {
			t.Fatalf("no cluster directory in output:\n%s", out)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("cluster directory %s left behind", dir)
		}
	})
}
