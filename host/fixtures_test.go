package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/host"
)

// TestFixturesValidate inspects every built plugin the way `fabric plugins
// validate` does. It also fills the shared compilation cache, which is why
// `make plugins` runs it once without -race: test binaries key the cache
// differently from the CLI ("dev" instead of wazero's module version).
func TestFixturesValidate(t *testing.T) {
	valid := []string{"healthy", "swap_v1", "swap_v2", "trap", "panic", "loop", "membomb",
		"hugeoutput", "badoutput", "ungranted", "bench", "delayed_promoter", "sqltrap", "slowpart", "legacyptr",
		"plugerr", "bigmem", "loop30", "slowhuge", "flood", "selfgrant", "promoter_skipslow", "churn",
		"liebatch", "kernelbomb", "squatter", "readleak", "metricbomb", "logflood",
		"recurse_scan"}
	invalid := map[string]error{
		"abimismatch": abi.ErrVersionMismatch,
		"noexport":    host.ErrMissingExport,
		"truncated":   host.ErrTruncated,
		"corrupt":     host.ErrTruncated,
		"notwasm":     host.ErrNotWasm,
	}
	// Every built plugin too (bin/plugins): this test is the compilation
	// cache prewarm `make plugins` runs, and a cold compile under -race
	// takes tens of seconds per module.
	paths := make([]string, len(valid))
	for i, name := range valid {
		paths[i] = fixture(t, name)
	}
	built, _ := filepath.Glob(filepath.Join("..", "bin", "plugins", "*.wasm"))
	for _, p := range built {
		if name := strings.TrimSuffix(filepath.Base(p), ".wasm"); !slices.Contains(valid, name) {
			valid = append(valid, name)
			paths = append(paths, p)
		}
	}
	ctx := context.Background()
	for i, name := range valid {
		// The path and the reason: `make plugins` shows this line when a
		// file in bin/plugins is one the host would refuse.
		path := paths[i]
		in, err := host.Inspect(ctx, path, host.InspectConfig{CacheDir: cacheDir})
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		wantABI := abi.Version
		if name == "legacyptr" {
			wantABI = "1.1.0" // built for the previous minor on purpose
		}
		if in.Manifest.ABI != wantABI || in.SHA256 == "" {
			t.Fatalf("%s: inspection %+v", name, in)
		}
	}
	for name, want := range invalid {
		if _, err := host.Inspect(ctx, fixture(t, name), host.InspectConfig{CacheDir: cacheDir}); !errors.Is(err, want) {
			t.Fatalf("%s: Inspect = %v, want %v", name, err, want)
		}
	}
}
