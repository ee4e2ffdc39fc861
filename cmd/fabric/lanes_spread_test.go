package main

import (
	"context"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
)

// TestLanesSpreadCLI: fabric lanes spread stores the lane's choice where
// producers read it, --off restores FlowFabric's, and bad input exits 2.
func TestLanesSpreadCLI(t *testing.T) {
	t.Parallel()
	srv := valkeytest.NewServer(t)
	url := srv.URL()
	read := func() map[string]string {
		c := valkeytest.Dial(t, url, 0)
		raw := c.Raw()
		m, err := raw.Do(context.Background(), raw.B().Hgetall().Key(model.LaneConfigKey("hot")).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	code, out, errOut := runCmd(t, "lanes", "spread", "--valkey-url", url, "--partitions", "16", "hot")
	if code != 0 || !strings.Contains(out, "lane hot: spread over 16 partitions") {
		t.Fatalf("spread: %d %q %q", code, out, errOut)
	}
	if m := read(); m[model.LaneFieldSoloPartitioner] != "spread" || m[model.LaneFieldSpreadPartitions] != "16" {
		t.Fatalf("stored %v", m)
	}
	if code, out, _ := runCmd(t, "lanes", "spread", "--valkey-url", url, "--off", "hot"); code != 0 || !strings.Contains(out, "one partition") {
		t.Fatalf("--off: %d %q", code, out)
	}
	if m := read(); m[model.LaneFieldSoloPartitioner] != "crc16" {
		t.Fatalf("stored after --off %v", m)
	}
	// The README's order: LANE first, flags after it.
	if code, out, errOut := runCmd(t, "lanes", "spread", "hot", "--valkey-url", url, "--partitions", "8"); code != 0 || !strings.Contains(out, "lane hot: spread over 8 partitions") {
		t.Fatalf("LANE before flags: %d %q %q", code, out, errOut)
	}
	if m := read(); m[model.LaneFieldSoloPartitioner] != "spread" || m[model.LaneFieldSpreadPartitions] != "8" {
		t.Fatalf("stored (LANE before flags) %v", m)
	}
	for name, args := range map[string][]string{
		"NoLane":      {"--valkey-url", url},
		"TooWide":     {"--valkey-url", url, "--partitions", "70000", "hot"},
		"OffAndWidth": {"--valkey-url", url, "--off", "--partitions", "2", "hot"},
		"EmptyLane":   {"--valkey-url", url, ""},
		"NoURL":       {"hot"},
		"TwoLanes":    {"hot", "--valkey-url", url, "cold"},
	} {
		if code, _, _ := runCmd(t, append([]string{"lanes", "spread"}, args...)...); code != 2 {
			t.Errorf("%s: exit %d, want 2", name, code)
		}
	}
}
