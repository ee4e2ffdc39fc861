package host

import "time"

// Defaults of Config, each in its field's unit.
const (
	// HostDebounceDefault: a .wasm must stay unchanged this long after its
	// last write event before it is loaded (half-written files never load).
	HostDebounceDefault = 150 * time.Millisecond
	// HostStopTimeoutDefault: the graceful shutdown budget.
	HostStopTimeoutDefault = 15 * time.Second
	// HostPoolSizeDefault: warm instances kept per plugin version. A
	// plugin's sweeps run one at a time; when an instance is discarded its
	// replacement is started at once off the call path (Module.refill), so
	// a call does not pay a guest start inside its timeout.
	HostPoolSizeDefault = 1
	// HostRecordsDefault: cycle records kept per plugin.
	HostRecordsDefault = 4096
	// HostMaxOutputBytesDefault: a scan result larger than this is bad
	// output.
	HostMaxOutputBytesDefault = 64 << 10
	// HostMaxFileBytesDefault: a .wasm larger than this is refused.
	HostMaxFileBytesDefault = 64 << 20
	// HostProbeTimeoutDefault bounds instantiation plus the manifest read.
	HostProbeTimeoutDefault = 10 * time.Second
	// HostRecycleCallsDefault: an instance is replaced after this many calls,
	// because linear memory never shrinks.
	HostRecycleCallsDefault = 10000
	// HostRecycleBytesDefault: an instance whose linear memory grew past
	// this during a call is replaced after it.
	HostRecycleBytesDefault = 16 << 20
	// HostPartitionsPerCallDefault: a sweep scans this many partitions per
	// plugin call (fabric_scan_batch) when the plugin can.
	HostPartitionsPerCallDefault = 32
	// HostQuarantineBaseDefault: the first quarantine lasts this long
	// (±10 %); each next one doubles it, for 7 steps, then it restarts.
	HostQuarantineBaseDefault = time.Second
	// HostProbationTimeoutDefault: the shortest cut of a call of a plugin
	// on probation (its last call faulted; see scheduler).
	HostProbationTimeoutDefault = time.Second
	// HostPoolBytesDefault bounds the memory caps of one plugin version's
	// idle instances together.
	HostPoolBytesDefault = 128 << 20
	// HostIdleReleaseDefault: an instance idle this long is released
	// (Config.IdleRelease). The stock plugins that are not pinned warm
	// sweep every 5 s or less often: each sweep then pays one
	// instantiation (~5 ms of CPU with its code faulted back in), and
	// between sweeps the plugin holds neither linear memory nor resident
	// code.
	HostIdleReleaseDefault = time.Second
	// quarantineSteps is the number of doublings before the backoff resets.
	quarantineSteps = 7
)
