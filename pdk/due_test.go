package pdk_test

import (
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/pdktest"
)

func TestDueScan(t *testing.T) {
	t.Parallel()
	part := model.Partition{Family: model.FamilyFlow, Index: 2}
	index := model.KeysOn(part).AttemptTimeout()
	plugin := func(s pdk.DueScan) pdk.Plugin {
		return pdk.Plugin{
			Manifest: pdk.Scanner("t", 1000, 50, []string{"ff_x", "fabric_y"}, []string{"ff:idx:*:attempt_timeout"}, nil),
			Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
				s.Indexes = func(abi.ScanRequest) []string { return []string{index} }
				return s.Run(h, req)
			},
		}
	}
	action := func(d pdk.Due) []abi.Call {
		return []abi.Call{{Function: "ff_x", Keys: []string{d.Index}, Args: []string{d.Member}}, {Function: "fabric_y", Keys: []string{d.Index}}}
	}
	setup := func(t *testing.T, p pdk.Plugin) (*pdktest.Host, string) {
		h := pdktest.New(t, p.Manifest)
		h.NowMs = 1000
		id := string(model.NewExecutionID(part, model.NewUUID()))
		h.ZAdd(index, 900, id)
		h.ZAdd(index, 5000, string(model.NewExecutionID(part, model.NewUUID())))
		h.Handle("fabric_y", func(_, _ []string) abi.CallResult { return abi.CallResult{Status: "OK"} })
		return h, id
	}

	// FlowFabric counts a {0, code} reply as processed; fabric counts it as
	// an error (and the host's tracker records a failure).
	t.Run("LuaErrorReplyIsAnError", func(t *testing.T) {
		t.Parallel()
		p := plugin(pdk.DueScan{Call: action})
		h, _ := setup(t, p)
		h.Handle("ff_x", func(_, _ []string) abi.CallResult {
			return abi.CallResult{Result: abi.StatusLuaError, Status: "execution_not_found"}
		})
		if res := h.Scan(p, part, 1); res.Acted != 0 || res.Errors != 1 {
			t.Fatalf("result = %+v, want 1 error and nothing acted", res)
		}
	})

	t.Run("CleanupCallsAreNotCountedAsActions", func(t *testing.T) {
		t.Parallel()
		p := plugin(pdk.DueScan{Call: action})
		h, id := setup(t, p)
		h.Handle("ff_x", func(_, _ []string) abi.CallResult { return abi.CallResult{Status: "OK"} })
		res := h.Scan(p, part, 1)
		if res.Acted != 1 || res.Errors != 0 || len(h.Calls) != 2 || h.Calls[0].Item != id || h.Calls[1].Item != "" {
			t.Fatalf("result = %+v, calls = %+v", res, h.Calls)
		}
	})

	// {1, "ALREADY_SATISFIED", ...} is a no-op (the work was already
	// done, e.g. a lease not yet expired): not acted, skipped.
	t.Run("AlreadySatisfiedIsNotActed", func(t *testing.T) {
		t.Parallel()
		p := plugin(pdk.DueScan{Call: action})
		h, _ := setup(t, p)
		h.Handle("ff_x", func(_, _ []string) abi.CallResult {
			return abi.CallResult{Status: "ALREADY_SATISFIED", Fields: []string{"not_yet_expired"}}
		})
		if res := h.Scan(p, part, 1); res.Acted != 0 || res.Skipped != 1 || res.Errors != 0 {
			t.Fatalf("result = %+v, want 1 skipped and nothing acted", res)
		}
	})

	t.Run("MalformedMembersAreSkipped", func(t *testing.T) {
		t.Parallel()
		p := plugin(pdk.DueScan{Call: action})
		h, _ := setup(t, p)
		h.Handle("ff_x", func(_, _ []string) abi.CallResult { return abi.CallResult{Status: "OK"} })
		h.ZAdd(index, 1, "garbage")
		h.ZAdd(index, 2, string(model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: 3}, model.NewUUID())))
		if res := h.Scan(p, part, 1); res.Skipped != 2 || res.Acted != 1 || len(h.Denied) != 0 {
			t.Fatalf("result = %+v, denied %v", res, h.Denied)
		}
	})

	t.Run("ReportsNextDueWhenAsked", func(t *testing.T) {
		t.Parallel()
		p := plugin(pdk.DueScan{Call: action})
		h, _ := setup(t, p)
		h.Handle("ff_x", func(_, _ []string) abi.CallResult { return abi.CallResult{Status: "OK"} })
		if res := h.Scan(p, part, 1); res.NextDueMs != 0 {
			t.Fatalf("next due without the host asking: %+v", res)
		}
		h.ConfigValues[pdk.ConfigNextDue] = "1"
		if res := h.Scan(p, part, 1); res.NextDueMs != 5000 {
			t.Fatalf("next due = %d, want 5000", res.NextDueMs)
		}
	})

	t.Run("FilterSkipsOtherNamespaces", func(t *testing.T) {
		t.Parallel()
		p := plugin(pdk.DueScan{Call: action})
		h, id := setup(t, p)
		h.Handle("ff_x", func(_, _ []string) abi.CallResult { return abi.CallResult{Status: "OK"} })
		h.ConfigValues["namespace"] = "mine"
		h.HSet(model.KeysFor(model.ExecutionID(id)).Core(), "namespace", "theirs")
		if res := h.Scan(p, part, 1); res.Skipped != 1 || res.Acted != 0 {
			t.Fatalf("result = %+v", res)
		}
		h.HSet(model.KeysFor(model.ExecutionID(id)).Core(), "namespace", "mine")
		if res := h.Scan(p, part, 1); res.Acted != 1 {
			t.Fatalf("result = %+v", res)
		}
	})
}
