package backend

import "errors"

// This file holds what the host (package host) needs of a backend beyond
// the Driver and free of the plugin ABI: the wake probe's reads and the
// keyevent subscription's topology error. The plugin-facing part (plugin
// data and SQL, in the ABI's types) is internal/hostseam, so that an SDK
// user does not compile the ABI.

// ErrTopologyChanged ends a subscription whose view of the backend's
// nodes is out of date (a Valkey cluster's primaries changed): the caller
// subscribes again at once rather than after its retry delay.
// valkey.ErrPrimariesChanged matches it.
var ErrTopologyChanged = errors.New("backend: topology changed")

// LowestScore is what a probe read of one sorted set found: the score of
// its lowest member, or Empty, or the error of the read.
type LowestScore struct {
	Score float64
	Empty bool
	Err   error
}
