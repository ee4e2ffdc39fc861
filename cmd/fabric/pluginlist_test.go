package main

import (
	"strings"
	"testing"

	"github.com/fabric-host/fabric/host"
)

// TestWritePluginListAligns checks the start-up plugin list keeps its
// columns in line when a name is longer than the others (the pg_* names
// once pushed their rows out) and leaves no trailing blanks.
func TestWritePluginListAligns(t *testing.T) {
	var b strings.Builder
	writePluginList(&b, []host.PluginStatus{
		{Name: "unblock", Version: "1.0.0", State: host.StateRunning},
		{Name: "pg_edge_cancel_reconciler", Version: "1.0.0", State: "disabled", Reason: "needs Postgres"},
		{Name: "delayed_promoter", Version: "1.0.10", State: host.StateRunning},
	})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", b.String())
	}
	col := -1
	for _, l := range lines {
		if l != strings.TrimRight(l, " ") {
			t.Errorf("trailing blanks in %q", l)
		}
		i := strings.Index(l, "1.0.")
		if col == -1 {
			col = i
		} else if i != col {
			t.Errorf("version column at %d in %q, want %d:\n%s", i, l, col, b.String())
		}
	}
	if !strings.HasSuffix(lines[1], "disabled needs Postgres") {
		t.Errorf("state and reason: %q", lines[1])
	}
}
