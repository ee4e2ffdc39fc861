package pdk_test

import (
	"fmt"
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
	"github.com/fabric-host/fabric/pdk/pdktest"
)

// A scanner built on the due-index skeleton, run against the fake host.
func ExampleDueScan() {
	plugin := pdk.Plugin{
		Manifest: abi.Manifest{Name: "example", Version: "0.1.0",
			Capabilities: abi.Capabilities{FCall: []string{"ff_expire"}, Read: []string{"ff:idx:*:attempt_timeout"}}},
		Scan: func(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
			keys := model.KeysOn(req.Partition)
			return pdk.DueScan{
				Indexes: func(abi.ScanRequest) []string { return []string{keys.AttemptTimeout()} },
				Call: func(d pdk.Due) []abi.Call {
					return []abi.Call{{Function: "ff_expire", Keys: []string{d.Index}, Args: []string{d.Member, strconv.FormatInt(d.NowMs, 10)}}}
				},
			}.Run(h, req)
		},
	}
	h := pdktest.New(nil, plugin.Manifest)
	part := model.Partition{Family: model.FamilyFlow, Index: 0}
	h.NowMs = 100
	due := string(model.NewExecutionID(part, model.NewUUID()))
	h.ZAdd(model.KeysOn(part).AttemptTimeout(), 50, due)
	h.ZAdd(model.KeysOn(part).AttemptTimeout(), 150, string(model.NewExecutionID(part, model.NewUUID())))
	h.Handle("ff_expire", func(keys, args []string) abi.CallResult { return abi.CallResult{Status: "OK"} })
	res := h.Scan(plugin, part, 1)
	fmt.Printf("scanned %d, acted %d, called %s at %s for the due id: %v\n", res.Scanned, res.Acted, h.Calls[0].Function, h.Calls[0].Args[1], h.Calls[0].Args[0] == due)
	// Output: scanned 1, acted 1, called ff_expire at 100 for the due id: true
}
