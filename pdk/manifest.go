package pdk

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
)

// ConfigWake is the manifest config key naming the index-key globs whose
// ZADDs wake a partition early when the host runs due-time timers
// (comma-separated, path.Match syntax, e.g. "ff:idx:*:lane:*:delayed").
const ConfigWake = abi.ConfigWake

// FilterReads are the read grants the scanner filter needs (namespace on
// exec core, instance tag on the tags hash).
var FilterReads = []string{"ff:exec:*:core", "ff:exec:*:tags"}

// LaneReads is the read grant Lanes needs: the lane registry.
var LaneReads = []string{model.KeyLanesIndex}

// SQLScanner is the manifest of a Postgres scanner plugin: a flow-family
// scanner whose only capability is the named SQL statements (grants as
// pgsql.Grants builds them), with its interval, batch size, call timeout
// and config defaults.
func SQLScanner(name string, intervalMs, batch, timeoutMs uint32, grants []string, config map[string]string) abi.Manifest {
	return abi.Manifest{
		Name: name, Version: "1.0.0", Kind: abi.KindScanner,
		IntervalMs: intervalMs, Family: "flow", BatchSize: batch, TimeoutMs: timeoutMs,
		Config:       config,
		Capabilities: abi.Capabilities{SQL: grants},
	}
}

// Itoa formats an int64 (plugins build ARGV with it).
func Itoa(v int64) string { return strconv.FormatInt(v, 10) }

// Scanner returns a scanner manifest with FlowFabric's shape: flow family,
// the given interval and batch, a 5 s call budget, reads granted for the
// filter plus reads, and FCALLs granted for fcall.
func Scanner(name string, intervalMs, batch uint32, fcall, reads []string, config map[string]string) abi.Manifest {
	return abi.Manifest{
		Name: name, Version: "1.0.0", Kind: abi.KindScanner,
		IntervalMs: intervalMs, Family: "flow", BatchSize: batch, TimeoutMs: 5000,
		Config:       config,
		Capabilities: abi.Capabilities{FCall: fcall, Read: append(append(append([]string{}, FilterReads...), LaneReads...), reads...)},
	}
}
