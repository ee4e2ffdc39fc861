//go:build unix

package host

import (
	"sync"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// newLinearMemory maps max bytes (the cap) for one linear memory, or
// falls back to the Go heap when the mapping cannot be made.
func newLinearMemory(capacity, max uint64) experimental.LinearMemory {
	if max > 0 && max <= 1<<32 {
		b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
		if err == nil {
			return &mmapMemory{buf: b}
		}
	}
	return &heapMemory{max: max, buf: make([]byte, 0, capacity)}
}

// mmapMemory is a linear memory in its own mapping: it grows in place and
// Free unmaps it at once.
type mmapMemory struct {
	mu  sync.Mutex
	buf []byte
}

func (m *mmapMemory) Reallocate(size uint64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buf == nil || size > uint64(len(m.buf)) {
		return nil
	}
	return m.buf[:size]
}

func (m *mmapMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buf != nil {
		_ = syscall.Munmap(m.buf)
		m.buf = nil
	}
}
