package host

import (
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"

	"github.com/fabric-host/fabric/host/env"
)

// instanceMemory allocates the linear memory of one instance (the Extism
// blocks are host-side, package env) and remembers it, so that it is
// released when the instance is discarded even if wazero closed the
// module at a deadline (a module closed that way keeps its memory until
// it is garbage, which for a mapping is never). On unix each memory is its
// own anonymous mapping of the cap (memory_unix.go): growth is in place,
// untouched pages cost nothing, and release is immediate.
//
// The linear memory and the instance's Extism kernel share one cap: a
// memory grows only while its size and what the kernel holds
// (env.Kernel.Charged) stay within limit, and the kernel counts the
// memory's size against the same limit (Kernel.Linear = size).
type instanceMemory struct {
	mu   sync.Mutex
	mems []experimental.LinearMemory

	// kernel and limit, when set, cap the memories with the kernel.
	kernel *env.Kernel
	limit  uint64
	total  atomic.Uint64 // the memories' sizes in bytes
}

// newInstanceMemory returns the memory allocator of an instance whose
// linear memory and kernel k share a cap of limit bytes.
func newInstanceMemory(k *env.Kernel, limit uint64) *instanceMemory {
	a := &instanceMemory{kernel: k, limit: limit}
	if k != nil {
		k.Linear = a.size
	}
	return a
}

// size returns the bytes of the instance's linear memories.
func (a *instanceMemory) size() uint64 { return a.total.Load() }

// Allocate implements experimental.MemoryAllocator.
func (a *instanceMemory) Allocate(capacity, max uint64) experimental.LinearMemory {
	lm := newLinearMemory(capacity, max)
	a.mu.Lock()
	a.mems = append(a.mems, lm)
	a.mu.Unlock()
	return &chargedMemory{LinearMemory: lm, owner: a}
}

// chargedMemory is a linear memory charged to its instance's cap: a
// growth past what the kernel leaves fails (memory.grow answers -1, and
// a guest runtime then dies out of memory).
type chargedMemory struct {
	experimental.LinearMemory
	owner *instanceMemory
	size  uint64
}

// Reallocate implements experimental.LinearMemory.
func (m *chargedMemory) Reallocate(size uint64) []byte {
	a := m.owner
	if size > m.size && a.kernel != nil && a.limit > 0 {
		if more := size - m.size; a.size()+a.kernel.Charged()+more > a.limit {
			return nil
		}
	}
	b := m.LinearMemory.Reallocate(size)
	if b != nil {
		a.total.Add(size - m.size) // wraps correctly for a shrink
		m.size = size
	}
	return b
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
