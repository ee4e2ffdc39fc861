package main

import (
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
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

// TestScanFiresDueSchedules: a due schedule gets its tick's create (the
// deterministic id, the schedule's lane, kind, payload and tags) then the
// advance to the next tick; a schedule not yet due gets nothing.
func TestScanFiresDueSchedules(t *testing.T) {
	t.Parallel()
	part := model.Partition{Family: model.FamilyFlow, Index: 2}
	keys := model.KeysOn(part)
	h := pdktest.New(t, Plugin.Manifest)
	h.NowMs = 10_050
	for name, due := range map[string]int64{"due": 10_000, "later": 20_000} {
		h.ZAdd(keys.PeriodicIndex(), float64(due), name)
		h.HSet(keys.PeriodicSchedule(name), periodic.FieldName, name, periodic.FieldLane, "l", periodic.FieldKind, "k",
			periodic.FieldPayload, "p", periodic.FieldEveryMs, "1000", periodic.FieldAnchorMs, "0",
			periodic.FieldNextDueMs, pdkItoa(due), periodic.FieldTags, `{"a":"b"}`, periodic.FieldNamespace, "ns")
	}
	h.Handle("ff_create_execution", func(k, args []string) abi.CallResult {
		return abi.CallResult{Result: abi.StatusOK, Status: "OK", Fields: []string{args[0]}}
	})
	h.Handle("fabric_periodic_advance", func(k, args []string) abi.CallResult {
		return abi.CallResult{Result: abi.StatusOK, Status: "OK", Fields: []string{"advanced", args[2]}}
	})
	res := h.Scan(Plugin, part, 1)
	if res.Acted != 1 || res.Errors != 0 {
		t.Fatalf("result = %+v", res)
	}
	if len(h.Calls) != 2 || h.Calls[0].Function != "ff_create_execution" || h.Calls[1].Function != "fabric_periodic_advance" {
		t.Fatalf("calls = %+v", h.Calls)
	}
	create, adv := h.Calls[0], h.Calls[1]
	eid := string(periodic.TickID(part, "due", 10_000))
	if create.Args[0] != eid || create.Args[1] != "ns" || create.Args[2] != "l" || create.Args[3] != "k" || create.Args[7] != "p" ||
		create.Args[10] != `{"a":"b","fabric.periodic":"due","fabric.periodic_tick_ms":"10000"}` || create.Keys[4] != keys.LaneEligible("l") {
		t.Fatalf("create = %+v", create)
	}
	if adv.Args[0] != "due" || adv.Args[1] != "10000" || adv.Args[2] != "11000" || adv.Args[3] != eid {
		t.Fatalf("advance = %+v", adv)
	}
}

func pdkItoa(v int64) string { return pdk.Itoa(v) }

// TestScanCatchesUpOverdueTicks: a schedule three ticks behind fires the
// three in one batch, each create followed by the advance of its tick.
func TestScanCatchesUpOverdueTicks(t *testing.T) {
	t.Parallel()
	part := model.Partition{Family: model.FamilyFlow, Index: 1}
	keys := model.KeysOn(part)
	h := pdktest.New(t, Plugin.Manifest)
	h.NowMs = 12_500
	h.ZAdd(keys.PeriodicIndex(), 10_000, "s")
	h.HSet(keys.PeriodicSchedule("s"), periodic.FieldLane, "l", periodic.FieldKind, "k", periodic.FieldEveryMs, "1000",
		periodic.FieldAnchorMs, "0", periodic.FieldNextDueMs, "10000")
	h.Handle("ff_create_execution", func(k, args []string) abi.CallResult {
		return abi.CallResult{Result: abi.StatusOK, Status: "OK", Fields: []string{args[0]}}
	})
	h.Handle("fabric_periodic_advance", func(k, args []string) abi.CallResult {
		return abi.CallResult{Result: abi.StatusOK, Status: "OK", Fields: []string{"advanced", args[2]}}
	})
	h.Scan(Plugin, part, 1)
	var got []string
	for _, c := range h.Calls {
		switch c.Function {
		case "ff_create_execution":
			got = append(got, "create "+c.Args[10])
		case "fabric_periodic_advance":
			got = append(got, "advance "+c.Args[1]+"->"+c.Args[2])
		}
	}
	want := []string{
		`create {"fabric.periodic":"s","fabric.periodic_tick_ms":"10000"}`, "advance 10000->11000",
		`create {"fabric.periodic":"s","fabric.periodic_tick_ms":"11000"}`, "advance 11000->12000",
		`create {"fabric.periodic":"s","fabric.periodic_tick_ms":"12000"}`, "advance 12000->13000",
	}
	if len(got) != len(want) {
		t.Fatalf("calls = %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("call %d = %q, want %q", i, got[i], want[i])
		}
	}
}
