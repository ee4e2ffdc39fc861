//go:build !linux

package host

import "time"

// threadCPU is the CPU time of the calling OS thread; outside Linux the
// host does not read it (false), and a call's budget is of wall time.
func threadCPU() (time.Duration, bool) { return 0, false }
