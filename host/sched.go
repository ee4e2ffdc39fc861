package host

import "github.com/fabric-host/fabric/host/hostfn"

// budgetOf is the host-function budget of limits (negative: not limited).
func budgetOf(l Limits) hostfn.Limits {
	pos := func(v int64) int64 { return max(v, 0) }
	return hostfn.Limits{CallsPerSweep: pos(l.HostCallsPerSweep), CallsPerSecond: pos(l.HostCallsPerSecond),
		CommandsPerSweep: pos(l.CommandsPerSweep), CommandsPerSecond: pos(l.CommandsPerSecond)}
}
