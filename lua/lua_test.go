package lua

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
)

func TestSourceShape(t *testing.T) {
	src := Source()
	if !strings.HasPrefix(src, "#!lua name=flowfabric\n") {
		t.Fatalf("source does not start with the shebang: %q", src[:40])
	}
	if Source() != src {
		t.Fatal("Source is not deterministic")
	}
	if !slices.Contains(Functions(), "ff_version") {
		t.Fatalf("ff_version not registered: %v", Functions())
	}
	hi := strings.Index(src, "-- source: lua/helpers.lua")
	vi := strings.Index(src, "-- source: lua/version.lua")
	if hi < 0 || vi < 0 || hi > vi {
		t.Fatalf("helpers.lua must come first (helpers at %d, version at %d)", hi, vi)
	}
}

func TestEveryFileIsAssembled(t *testing.T) {
	entries, err := fs.Glob(files, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !slices.Contains(Files, e) {
			t.Errorf("lua/%s is embedded but not listed in Files, so it would never load", e)
		}
	}
}

func TestFunctionsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Functions() {
		if seen[f] {
			t.Errorf("%s registered twice", f)
		}
		seen[f] = true
		if !strings.HasPrefix(f, "ff_") {
			t.Errorf("%s is not an ff_ function; fabric's own additions belong in a separate library", f)
		}
	}
}

func TestFabricVersionMatches(t *testing.T) {
	want := "redis.register_function('fabric_version', function(keys, args) return '" + FabricVersion + "' end)"
	if !strings.Contains(FabricSource(), want) {
		t.Fatalf("fabric_version must return FabricVersion %q (bump both when fabric.lua changes)", FabricVersion)
	}
}
