package host

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPruneCompilationCache(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	sub := filepath.Join(dir, "wazero-v1.9.0-amd64-linux")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// The subtests run in order on one directory. Five 1 KiB entries used 5, 4, 3, 2 days ago and just now.
	ages := []time.Duration{120 * time.Hour, 96 * time.Hour, 72 * time.Hour, 48 * time.Hour, time.Minute}
	for i, age := range ages {
		p := filepath.Join(sub, string(rune('a'+i)))
		if err := os.WriteFile(p, make([]byte, 1024), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		max      int64
		removed  int
		survivor []string
	}{
		{"UnderBudgetKeepsAll", 10 << 10, 0, []string{"a", "b", "c", "d", "e"}},
		{"OldestGoFirst", 3 << 10, 2, []string{"c", "d", "e"}},
		{"RecentlyUsedKeptOverBudget", 0, 2, []string{"e"}}, // c and d; e was read a minute ago
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := PruneCompilationCache(dir, tc.max, now)
			if err != nil {
				t.Fatal(err)
			}
			if res.Removed != tc.removed {
				t.Errorf("removed %d, want %d (%+v)", res.Removed, tc.removed, res)
			}
			left, _ := os.ReadDir(sub)
			var names []string
			for _, e := range left {
				names = append(names, e.Name())
			}
			if len(names) != len(tc.survivor) {
				t.Fatalf("left %v, want %v", names, tc.survivor)
			}
			for i := range names {
				if names[i] != tc.survivor[i] {
					t.Fatalf("left %v, want %v", names, tc.survivor)
				}
			}
		})
	}
	if res, err := PruneCompilationCache(filepath.Join(dir, "missing"), 0, now); err != nil || res.Entries != 0 {
		t.Fatalf("missing dir: %+v, %v", res, err)
	}
}
