package main

import (
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

// TestScanCounts: repair mode calls fabric_reconcile_execution_index for
// each member with a core on its own lane and counts what the replies say;
// log mode (FlowFabric's) calls nothing; an unknown mode scans nothing.
func TestScanCounts(t *testing.T) {
	t.Parallel()
	part := model.Partition{Family: model.FamilyFlow, Index: 2}
	pk := model.KeysOn(part)
	setup := func(t *testing.T) (*pdktest.Host, []string) {
		h := pdktest.New(t, Plugin.Manifest)
		var ids []string
		for i, lane := range []string{"default", "fast", "default", "default", ""} {
			id := string(model.NewExecutionID(part, model.NewUUID()))
			ids = append(ids, id)
			h.SAdd(pk.AllExecutions(), id)
			if i < 4 {
				h.HSet(model.KeysFor(model.ExecutionID(id)).Core(), "lifecycle_phase", "runnable", "eligibility_state", "eligible_now", "lane_id", lane)
			}
		}
		h.SAdd(pk.AllExecutions(), "garbage")
		replies := map[string]abi.CallResult{
			ids[0]: {Result: abi.StatusOK, Status: "OK", Fields: []string{"repaired", "eligible", "5", "1", "", ""}},
			ids[1]: {Result: abi.StatusOK, Status: "OK", Fields: []string{"consistent", "eligible", "5"}},
			ids[2]: {Result: abi.StatusLuaError, Status: "lane_mismatch", Fields: []string{"x"}},
			ids[3]: {Result: abi.StatusOK, Status: "OK", Fields: []string{"unknown", "submitted", "", ""}},
		}
		h.Handle(reconcileFunction, func(keys, args []string) abi.CallResult { return replies[args[0]] })
		return h, ids
	}

	t.Run("Repair", func(t *testing.T) {
		t.Parallel()
		h, ids := setup(t)
		res := h.Scan(Plugin, part, 1)
		// 6 members: 1 repaired, 1 consistent, 1 error, 1 unknown, no core
		// and malformed skipped.
		if want := (abi.ScanResult{Scanned: 6, Acted: 1, Errors: 1, Skipped: 2}); res != want {
			t.Fatalf("result = %+v, want %+v", res, want)
		}
		if len(h.Calls) != 4 {
			t.Fatalf("calls = %d, want 4 (members with a core)", len(h.Calls))
		}
		for _, c := range h.Calls {
			if c.Args[0] == ids[1] {
				if c.Args[1] != "fast" || c.Keys[2] != pk.LaneEligible("fast") || c.Keys[11] != pk.LaneBlockedOperator("fast") || len(c.Keys) != 12 {
					t.Fatalf("call on lane fast: %+v", c)
				}
			}
		}
	})

	t.Run("Log", func(t *testing.T) {
		t.Parallel()
		h, _ := setup(t)
		h.ConfigValues["mode"] = "log"
		res := h.Scan(Plugin, part, 1)
		// FlowFabric's counting: 4 missing from lane:eligible, 1 core
		// missing, 1 malformed id, all "processed".
		if want := (abi.ScanResult{Scanned: 6, Acted: 6}); res != want {
			t.Fatalf("result = %+v, want %+v", res, want)
		}
		if len(h.Calls) != 0 {
			t.Fatalf("log mode called %d functions", len(h.Calls))
		}
	})

	t.Run("UnknownMode", func(t *testing.T) {
		t.Parallel()
		h, _ := setup(t)
		h.ConfigValues["mode"] = "fix"
		if res := h.Scan(Plugin, part, 1); res != (abi.ScanResult{Errors: 1}) {
			t.Fatalf("result = %+v", res)
		}
		if len(h.Logs) != 1 || !strings.Contains(h.Logs[0].Msg, "mode=fix") {
			t.Fatalf("logs = %+v", h.Logs)
		}
	})
}
