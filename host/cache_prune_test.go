package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/fabric-host/fabric/abi"
)

// TestPruneCompilationCache: the cache is cut down to its bound keeping
// the most recently used files, wazero's entries and machine code files
// alike; what was used in the last minutes stays beyond the bound;
// abandoned temporary files go, ones being written stay.
func TestPruneCompilationCache(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	sub := filepath.Join(dir, "wazero-v1.9.0-amd64-linux")
	code := filepath.Join(dir, codeDirName)
	for _, d := range []string{sub, code} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The subtests run in order on one directory. 1 KiB files used 5, 4,
	// 3, 2 days ago and 5 minutes ago, half of them code files; a
	// temporary file abandoned two hours ago and one being written.
	files := []struct {
		path string
		age  time.Duration
	}{
		{filepath.Join(sub, "a"), 120 * time.Hour},
		{filepath.Join(code, "b.code"), 96 * time.Hour},
		{filepath.Join(sub, "c"), 72 * time.Hour},
		{filepath.Join(code, "d.code"), 48 * time.Hour},
		{filepath.Join(sub, "e"), 5 * time.Minute},
		{filepath.Join(sub, "f.123.tmp"), 2 * time.Hour},
		{filepath.Join(code, ".code-456"), time.Second},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, make([]byte, 1024), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-f.age)
		if err := os.Chtimes(f.path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		max      int64
		removed  int
		survivor []string
	}{
		{"UnderBoundKeepsAllButAbandoned", 10 << 10, 1, []string{"a", "b.code", "c", "d.code", "e", ".code-456"}},
		{"MostRecentUpToTheBound", 3 << 10, 2, []string{"c", "d.code", "e", ".code-456"}},
		{"OldestGoFirstWhateverTheirKind", 2 << 10, 1, []string{"d.code", "e", ".code-456"}},
		{"RecentlyUsedKeptOverBound", 0, 1, []string{"e", ".code-456"}},
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
			var names []string
			for _, f := range files {
				if _, err := os.Stat(f.path); err == nil {
					names = append(names, filepath.Base(f.path))
				}
			}
			if !slices.Equal(names, tc.survivor) {
				t.Fatalf("left %v, want %v", names, tc.survivor)
			}
		})
	}
	if res, err := PruneCompilationCache(filepath.Join(dir, "missing"), 0, now); err != nil || res.Entries != 0 {
		t.Fatalf("missing dir: %+v, %v", res, err)
	}
}

// tinyWasm is a module of one function (() -> i32 1), exported under the
// names the host's static check requires.
var tinyWasm = func() []byte {
	b := []byte{
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f, // type: () -> i32
		0x03, 0x02, 0x01, 0x00, // func 0 of type 0
	}
	exports := []byte{byte(len(abi.RequiredExports))}
	for _, name := range abi.RequiredExports {
		exports = append(exports, byte(len(name)))
		exports = append(exports, name...)
		exports = append(exports, 0x00, 0x00) // func 0
	}
	b = append(b, 0x07, byte(len(exports)))
	b = append(b, exports...)
	return append(b, 0x0a, 0x06, 0x01, 0x04, 0x00, 0x41, 0x01, 0x0b) // i32.const 1
}()

// TestCacheUseMarked: a compile from the cache marks the wazero entry it
// read as used now, so pruning keeps it although relatime would leave its
// access time days old; CacheHolds finds the entry of a plugin file.
// Both recompute wazero v1.9.0's entry name; a wazero upgrade that
// changes it fails here.
func TestCacheUseMarked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "tiny.wasm")
	if err := os.WriteFile(file, tinyWasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := CacheHolds(dir, file, true); ok || err != nil {
		t.Fatalf("empty cache: CacheHolds = %v, %v", ok, err)
	}
	compile := func() {
		t.Helper()
		cache, err := newDirCache(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer cache.Close(ctx)
		rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithCompilationCache(cache))
		defer rt.Close(ctx)
		if _, err := rt.CompileModule(ctx, compactData(tinyWasm)); err != nil {
			t.Fatal(err)
		}
	}
	compile()
	entries, _ := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
	if len(entries) != 1 {
		t.Fatalf("cache entries %v, want one", entries)
	}
	if ok, err := CacheHolds(dir, file, true); !ok || err != nil {
		t.Fatalf("after the compile: CacheHolds = %v, %v (wazero's entry name changed?)", ok, err)
	}
	old := time.Now().Add(-72 * time.Hour)
	if err := os.Chtimes(entries[0], old, old); err != nil {
		t.Fatal(err)
	}
	compile() // a fresh engine: read from the file
	now := time.Now()
	marked := markWazeroEntry(dir, compactData(tinyWasm), true, now)
	if !slices.Equal(marked, entries) {
		t.Fatalf("marked %v, want the module's entry %v (wazero's entry name changed?)", marked, entries)
	}
	if st, err := os.Stat(entries[0]); err != nil || st.ModTime().Before(now.Add(-time.Second)) {
		t.Fatalf("entry not marked used: %v %v", st.ModTime(), err)
	}
	if got := markWazeroEntry(dir, append(slices.Clone(tinyWasm), 0x00, 0x04, 'n', 'a', 'm', 'e'), true, now); got != nil {
		t.Fatalf("another module marked %v", got)
	}
	// With a stale entry beside it and no room, pruning keeps the marked one.
	stale := filepath.Join(filepath.Dir(entries[0]), "stale")
	if err := os.WriteFile(stale, make([]byte, 1024), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := PruneCompilationCache(dir, 0, now); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(entries[0]); err != nil {
		t.Fatalf("the entry used now was pruned: %v", err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Fatal("the stale entry was kept beyond the bound")
	}
}
