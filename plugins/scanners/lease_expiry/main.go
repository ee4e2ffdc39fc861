// Command lease_expiry is the fabric scanner plugin that marks expired
// leases: it reads ff:idx:{fp:N}:lease_expiry up to now and runs
// ff_mark_lease_expired_if_due per due execution (FlowFabric's
// lease_expiry, engine spec §9.1: 1.5 s, 50 per partition).
//
// Unlike FlowFabric, each mark is followed in the same pipeline by
// fabric_clear_lease_expiry, which drops the index entry once the lease is
// marked expired or revoked (or the execution is gone or no longer
// active): FlowFabric leaves it, so it is re-marked and re-counted every
// sweep and 50 such entries starve newer expirations.
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the lease-expiry scanner, registered in init.
var Plugin = pdk.Plugin{
	Manifest: pdk.Scanner("lease_expiry", 1500, 50,
		[]string{"ff_mark_lease_expired_if_due", "fabric_clear_lease_expiry"}, []string{"ff:idx:*:lease_expiry"},
		map[string]string{pdk.ConfigWake: "ff:idx:*:lease_expiry"}),
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	index := model.KeysOn(req.Partition).LeaseExpiry()
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{index} },
		Call: func(d pdk.Due) []abi.Call {
			k := model.KeysFor(model.ExecutionID(d.Member))
			return []abi.Call{
				// KEYS: exec_core, lease_current, lease_expiry, lease_history; ARGV: execution_id.
				{Function: "ff_mark_lease_expired_if_due", Keys: []string{k.Core(), k.LeaseCurrent(), index, k.LeaseHistory()}, Args: []string{d.Member}},
				// KEYS: exec_core, lease_expiry; ARGV: execution_id.
				{Function: "fabric_clear_lease_expiry", Keys: []string{k.Core(), index}, Args: []string{d.Member}},
			}
		},
	}.Run(h, req)
}
