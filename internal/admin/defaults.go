package admin

import "time"

// Defaults of ServerConfig and SamplerConfig, each in its field's unit.
const (
	// ServerAddrDefault: loopback only; an operator who wants the admin
	// port reachable from elsewhere says so.
	ServerAddrDefault = "127.0.0.1:9480"
	// ServerProbeTimeoutDefault bounds the backend round trip of one
	// /healthz or /readyz request.
	ServerProbeTimeoutDefault = time.Second
	// ServerIdleTimeoutDefault closes a keep-alive connection idle this
	// long: a browser tab's next poll opens a new one.
	ServerIdleTimeoutDefault = 30 * time.Second
	// SamplerIntervalDefault: one keyspace census every 2 s (O(partitions ×
	// lanes) commands, pipelined).
	SamplerIntervalDefault = 2 * time.Second
	// SamplerTimeoutDefault bounds one census.
	SamplerTimeoutDefault = 5 * time.Second
)
