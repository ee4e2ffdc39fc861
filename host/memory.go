package host

import (
	"runtime/debug"
	"sync"

	"github.com/tetratelabs/wazero/experimental"
)

// instanceMemory allocates the linear memory of one instance (the Extism
// blocks are host-side, package env) and remembers it, so that it is
// released when the instance is discarded even if wazero closed the
// module at a deadline (a module closed that way keeps its memory until
// it is garbage, which for a mapping is never). On unix each memory is its
// own anonymous mapping of the cap (memory_unix.go): growth is in place,
// untouched pages cost nothing, and release is immediate.
type instanceMemory struct {
	mu   sync.Mutex
	mems []experimental.LinearMemory
}

// Allocate implements experimental.MemoryAllocator.
func (a *instanceMemory) Allocate(capacity, max uint64) experimental.LinearMemory {
	lm := newLinearMemory(capacity, max)
	a.mu.Lock()
	a.mems = append(a.mems, lm)
	a.mu.Unlock()
	return lm
}

// free releases every memory of the instance; it must not run again.
func (a *instanceMemory) free() {
	a.mu.Lock()
	mems := a.mems
	a.mems = nil
	a.mu.Unlock()
	for _, lm := range mems {
		lm.Free()
	}
}

// heapMemory is a Go-heap linear memory, like wazero's own.
type heapMemory struct {
	buf []byte
	max uint64
}

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	b := make([]byte, size, min(m.max, max(size, 2*uint64(cap(m.buf)))))
	copy(b, m.buf)
	m.buf = b
	return b
}

func (m *heapMemory) Free() { m.buf = nil }

// releaseLoadGarbage returns to the system the Go heap that loading
// plugins left as garbage. Compiling and decoding a module allocates
// several times what the compiled module keeps; without this the heap
// stays at its peak (the runtime keeps freed pages until the heap goal
// drops), about 40 MiB more than live for the default set.
func releaseLoadGarbage() { debug.FreeOSMemory() }
