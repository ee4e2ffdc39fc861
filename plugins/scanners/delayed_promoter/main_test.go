package main

import (
	"errors"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk/pdktest"
)

func TestManifestIsValid(t *testing.T) {
	t.Parallel()
	m := Plugin.Manifest
	m.ABI = abi.Version
	m.ApplyDefaults()
	if err := m.Validate(); err != nil {
		t.Fatalf("manifest: %v", err)
	}
}

func TestScan(t *testing.T) {
	t.Parallel()
	part := model.Partition{Family: model.FamilyFlow, Index: 3}
	keys := model.KeysOn(part)

	setup := func(t *testing.T) (*pdktest.Host, []model.ExecutionID) {
		t.Helper()
		h := pdktest.New(t, Plugin.Manifest)
		h.NowMs = 10_000
		var ids []model.ExecutionID
		for i := range 3 {
			id := model.NewExecutionID(part, model.NewUUID())
			ids = append(ids, id)
			h.ZAdd(keys.LaneDelayed("default"), float64(9_000+i*1_000), string(id)) // 9000, 10000 due; 11000 not
		}
		h.Handle("ff_promote_delayed", func(k, args []string) abi.CallResult {
			h.ZRem(k[1], args[0])
			h.ZAdd(k[2], 1, args[0])
			return abi.CallResult{Result: abi.StatusOK, Status: "OK", Fields: []string{"promoted"}}
		})
		return h, ids
	}

	t.Run("PromotesOnlyDueIDs", func(t *testing.T) {
		t.Parallel()
		h, ids := setup(t)
		res := h.Scan(Plugin, part, 1)
		if want := (abi.ScanResult{Scanned: 2, Acted: 2}); res != want {
			t.Fatalf("result = %+v, want %+v", res, want)
		}
		if len(h.Calls) != 2 {
			t.Fatalf("calls = %d, want 2", len(h.Calls))
		}
		c := h.Calls[0]
		wantKeys := []string{model.KeysFor(ids[0]).Core(), keys.LaneDelayed("default"), keys.LaneEligible("default")}
		if len(c.Keys) != 3 || c.Keys[0] != wantKeys[0] || c.Keys[1] != wantKeys[1] || c.Keys[2] != wantKeys[2] {
			t.Fatalf("keys = %q, want %q", c.Keys, wantKeys)
		}
		if len(c.Args) != 2 || c.Args[0] != string(ids[0]) || c.Args[1] != "10000" {
			t.Fatalf("args = %q", c.Args)
		}
		if _, ok := h.ZScore(keys.LaneDelayed("default"), string(ids[2])); !ok {
			t.Fatal("not-yet-due id was promoted")
		}
	})

	t.Run("ReadsEveryConfiguredLane", func(t *testing.T) {
		t.Parallel()
		h, _ := setup(t)
		h.ConfigValues["lanes"] = "default, fast"
		h.ZAdd(keys.LaneDelayed("fast"), 1, string(model.NewExecutionID(part, model.NewUUID())))
		if res := h.Scan(Plugin, part, 1); res.Acted != 3 {
			t.Fatalf("acted = %d, want 3", res.Acted)
		}
	})

	t.Run("SkipsTrackedItemsAndCountsErrors", func(t *testing.T) {
		t.Parallel()
		h, ids := setup(t)
		h.Tracker = func(item string) bool { return item == string(ids[0]) }
		h.Handle("ff_promote_delayed", func(k, args []string) abi.CallResult {
			return abi.CallResult{Result: abi.StatusLuaError, Status: "invalid_input"}
		})
		if res := h.Scan(Plugin, part, 1); res != (abi.ScanResult{Scanned: 2, Skipped: 1, Errors: 1}) {
			t.Fatalf("result = %+v", res)
		}
	})

	t.Run("ReadOutsideGrantIsRefused", func(t *testing.T) {
		t.Parallel()
		h, _ := setup(t)
		_, err := h.SMembers(keys.AllExecutions())
		if !errors.Is(err, abi.CodeDenied) {
			t.Fatalf("err = %v, want denied", err)
		}
	})
}

func BenchmarkScanNative(b *testing.B) {
	part := model.Partition{Family: model.FamilyFlow, Index: 0}
	h := pdktest.New(b, Plugin.Manifest)
	for b.Loop() {
		h.Scan(Plugin, part, 1)
	}
}

// TestRecordedCase runs the plugin natively on the partition recorded in
// testdata/replay (a case `fabric record` took of a live server): its
// FCALLs are the ones the .wasm build made when the case was replayed on
// a private server (the golden file's actions).
func TestRecordedCase(t *testing.T) {
	t.Parallel()
	const dir = "../../../testdata/replay/"
	h := pdktest.New(t, Plugin.Manifest)
	part, _ := h.LoadCase(dir + "delayed_promoter.case.json")
	h.Handle("ff_promote_delayed", func(k, args []string) abi.CallResult {
		return abi.CallResult{Result: abi.StatusOK, Status: "OK", Fields: []string{"promoted"}}
	})
	res := h.Scan(Plugin, part, 1)
	golden, err := os.ReadFile(dir + "delayed_promoter.golden")
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, line := range strings.Split(string(golden), "\n") {
		if a, ok := strings.CutPrefix(line, "  fcall "); ok {
			want = append(want, strings.SplitN(a, " -> ", 2)[0])
		}
	}
	quote := func(ss []string) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, " ") + "]"
	}
	for _, c := range h.Calls {
		got = append(got, c.Function+" keys="+quote(c.Keys)+" args="+quote(c.Args))
	}
	sort.Strings(got)
	if len(want) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") || int(res.Acted) != len(want) {
		t.Fatalf("on the recorded case the plugin called (acted %d)\n%s\nwant (the replay's golden actions)\n%s", res.Acted, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
