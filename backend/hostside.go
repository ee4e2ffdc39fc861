package backend

import "errors"

// This file holds what the host (package host) needs of a backend beyond
// the Driver, so that the host names no driver package: the drivers
// implement host.Backend with these types.

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
