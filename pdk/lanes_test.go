package pdk_test

import (
	"slices"
	"testing"

	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/pdktest"
)

// TestLanes is not parallel: Lanes caches the registry per instance, as a
// plugin instance does, and the steps rely on the order of reads.
func TestLanes(t *testing.T) {
	m := pdk.Scanner("lanes", 1000, 10, nil, nil, nil)
	h := pdktest.New(t, m)
	h.NowMs = 1_000_000

	// Empty registry, no config: the default lane.
	if got := pdk.Lanes(h); !slices.Equal(got, []string{"default"}) {
		t.Fatalf("empty registry: %v, want [default]", got)
	}
	// The registry, sorted.
	h.SAdd(model.KeyLanesIndex, "zeta", "alpha")
	h.NowMs += pdk.LaneRegistryRefreshMs
	if got := pdk.Lanes(h); !slices.Equal(got, []string{"alpha", "zeta"}) {
		t.Fatalf("registry: %v, want [alpha zeta]", got)
	}
	// A lane added meanwhile shows up after the refresh interval, not before.
	h.SAdd(model.KeyLanesIndex, "mid")
	h.NowMs += pdk.LaneRegistryRefreshMs - 1
	if got := pdk.Lanes(h); len(got) != 2 {
		t.Fatalf("within the refresh interval: %v, want the cached 2 lanes", got)
	}
	h.NowMs++
	if got := pdk.Lanes(h); !slices.Equal(got, []string{"alpha", "mid", "zeta"}) {
		t.Fatalf("after the refresh interval: %v", got)
	}
	// The config wins.
	h.ConfigValues["lanes"] = " x, y ,"
	if got := pdk.Lanes(h); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("config: %v, want [x y]", got)
	}
	// Scanners are granted the read.
	if !slices.Contains(m.Capabilities.Read, model.KeyLanesIndex) {
		t.Fatalf("pdk.Scanner grants no read of %s: %v", model.KeyLanesIndex, m.Capabilities.Read)
	}
}
