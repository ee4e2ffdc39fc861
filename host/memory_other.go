//go:build !unix

package host

import "github.com/tetratelabs/wazero/experimental"

// newLinearMemory is a Go-heap memory off unix.
func newLinearMemory(capacity, max uint64) experimental.LinearMemory {
	return &heapMemory{max: max, buf: make([]byte, 0, capacity)}
}
