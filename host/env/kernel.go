// Package env implements the Extism host ABI (the "extism:host/env"
// import module every Extism plugin uses for its input, output, errors,
// config and memory blocks) natively in Go on wazero, in place of Extism's
// kernel module.
//
// Extism's go-sdk keeps a plugin's blocks in a second wasm module (the
// kernel) and serves each env import by calling into it: every block
// allocation, input byte and output is a nested wasm call, and with a
// plugin timeout each nested call starts a goroutine watching the
// deadline. Here the blocks live host-side in a Kernel (one per plugin
// instance), each env import is a Go function over it, and a plugin call
// is one wasm call.
//
// The guest ABI is Extism's, unchanged: a plugin built with an Extism PDK
// runs the same under any standard Extism host and under this one.
//
// # Notes
//
//   - A Kernel serves one call at a time (an instance runs one call at a
//     time); it is not safe for concurrent use.
package env

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrOutOfMemory is matched by the failure of an allocation or hold past
// a kernel's limit. Alloc panics with it (wrapped), which traps the guest
// call; the host reports that call as over memory.
var ErrOutOfMemory = errors.New("extism kernel: out of memory")

// base is the offset of a kernel's first block: offset 0 is Extism's null.
const base = 8

// keepArena is the arena capacity a Reset keeps for the next call; a
// call that grew it further gives the rest back to the Go heap.
const keepArena = 256 << 10

// Kernel is one plugin instance's Extism memory: its blocks (in one
// arena, at offsets the guest sees), the call's input, output and error,
// the plugin's config and vars.
//
// Everything the host holds for the plugin counts against one limit, the
// plugin's memory cap: the arena's capacity, the bytes host functions
// hold for the call in progress (Hold) and, through Linear, the plugin's
// linear memory.
type Kernel struct {
	arena []byte // offset o is arena[o-base]
	limit uint64 // the plugin's memory cap in bytes
	held  uint64 // bytes host functions hold for the call (Hold)
	live  map[uint64]uint64
	free  []span

	// Linear, when set, returns the bytes of the plugin's linear memory,
	// charged against the limit with the kernel's own.
	Linear func() uint64

	input, inputLen   uint64
	output, outputLen uint64
	errPtr            uint64

	// Config is what config_get answers (the manifest's config).
	Config map[string]string
	vars   map[string][]byte
	// Log, when set, receives the guest's log_* lines (level as slog's:
	// -8 trace, -4 debug, 0 info, 4 warn, 8 error).
	Log func(level int, msg string)
}

// span is a freed block's room: its offset and capacity.
type span struct{ off, size uint64 }

// maxVarBytes bounds the bytes of a plugin's vars, as Extism's default.
const maxVarBytes = 1 << 20

// NewKernel returns an empty kernel whose blocks, holds and linear memory
// (Linear) may take up to limit bytes together (an allocation past it
// traps as out of memory).
func NewKernel(limit uint64) *Kernel {
	if limit == 0 || limit > 1<<32-base {
		limit = 1<<32 - base
	}
	return &Kernel{limit: limit, live: make(map[uint64]uint64, 8)}
}

// Reset frees every block and clears input, output and error, as
// Extism's kernel reset before each call. Config and vars stay.
func (k *Kernel) Reset() {
	if cap(k.arena) > keepArena {
		k.arena = nil
	}
	k.arena = k.arena[:0]
	clear(k.live)
	k.free = k.free[:0]
	k.held = 0
	k.input, k.inputLen, k.output, k.outputLen, k.errPtr = 0, 0, 0, 0, 0
}

// Alloc returns the offset of a new block of n bytes (contents
// unspecified), 0 for n == 0. It panics with ErrOutOfMemory, which traps
// the guest call, when the block does not fit under the limit.
func (k *Kernel) Alloc(n uint64) uint64 {
	off, err := k.TryAlloc(n)
	if err != nil {
		panic(err)
	}
	return off
}

// TryAlloc is Alloc returning an error wrapping ErrOutOfMemory instead of
// panicking, for allocations outside a guest call.
func (k *Kernel) TryAlloc(n uint64) (uint64, error) {
	if n == 0 {
		return 0, nil
	}
	size := (n + 7) &^ 7
	for i, s := range k.free {
		if s.size >= size && s.size <= 2*size {
			k.free[i] = k.free[len(k.free)-1]
			k.free = k.free[:len(k.free)-1]
			k.live[s.off] = n
			return s.off, nil
		}
	}
	top := uint64(len(k.arena))
	if size > 1<<32-base || top+size > 1<<32-base {
		return 0, fmt.Errorf("%w: a block of %d bytes past the 4 GiB address space (%d in use)", ErrOutOfMemory, n, top)
	}
	if need := top + size; need > uint64(cap(k.arena)) {
		if err := k.grow(need); err != nil {
			return 0, fmt.Errorf("%w (a block of %d bytes)", err, n)
		}
	}
	k.arena = k.arena[:top+size]
	off := base + top
	k.live[off] = n
	return off, nil
}

// grow gives the arena a capacity of at least need bytes, within the room
// the limit leaves: doubled while that fits, else all the room there is.
func (k *Kernel) grow(need uint64) error {
	have := uint64(cap(k.arena))
	room := k.Room()
	if need-have > room {
		return fmt.Errorf("%w: %d more bytes, %d left of the %d-byte cap (blocks %d, held %d, linear memory %d)",
			ErrOutOfMemory, need-have, room, k.limit, have, k.held, k.linear())
	}
	grown := make([]byte, len(k.arena), min(have+room, max(need, 2*have, 4096)))
	copy(grown, k.arena)
	k.arena = grown
	return nil
}

// Room returns the bytes left under the limit: the limit less the arena's
// capacity, the bytes held and the linear memory.
func (k *Kernel) Room() uint64 {
	used := k.Charged() + k.linear()
	if used >= k.limit {
		return 0
	}
	return k.limit - used
}

// Charged returns the bytes the kernel counts against the limit for
// itself: its arena's capacity and the bytes held (Hold). The linear
// memory is charged with them (Room), by its owner.
func (k *Kernel) Charged() uint64 { return uint64(cap(k.arena)) + k.held }

func (k *Kernel) linear() uint64 {
	if k.Linear == nil {
		return 0
	}
	return k.Linear()
}

// Hold charges n bytes the host keeps for the current call (a request's
// copy, its decoded form) against the limit, until Release(n) or the
// next Reset. It fails with ErrOutOfMemory when they do not fit.
func (k *Kernel) Hold(n uint64) error {
	if room := k.Room(); n > room {
		return fmt.Errorf("%w: the host would hold %d bytes for the call, %d left of the %d-byte cap", ErrOutOfMemory, n, room, k.limit)
	}
	k.held += n
	return nil
}

// Release gives back n bytes of Hold.
func (k *Kernel) Release(n uint64) { k.held -= min(n, k.held) }

// Free frees the block at off; anything else (0, a freed block) is
// ignored.
func (k *Kernel) Free(off uint64) {
	n, ok := k.live[off]
	if !ok {
		return
	}
	delete(k.live, off)
	size := (n + 7) &^ 7
	if off-base+size == uint64(len(k.arena)) {
		k.arena = k.arena[:off-base] // the last block: give its room back
		return
	}
	k.free = append(k.free, span{off, size})
}

// Length returns the length of the block at off, 0 when off names none.
func (k *Kernel) Length(off uint64) uint64 { return k.live[off] }

// Bytes returns the n bytes at off, a view into the kernel (valid until
// its next allocation), or false when they are not all kernel memory.
func (k *Kernel) Bytes(off, n uint64) ([]byte, bool) {
	if off < base || off-base > uint64(len(k.arena)) || n > uint64(len(k.arena))-(off-base) {
		return nil, false
	}
	return k.arena[off-base : off-base+n], true
}

// Block returns the block at off (a view, as Bytes), or false when off
// names no block.
func (k *Kernel) Block(off uint64) ([]byte, bool) {
	n, ok := k.live[off]
	if !ok {
		return nil, false
	}
	return k.Bytes(off, n)
}

// Write copies b into a new block and returns its offset (0 for an empty
// b).
func (k *Kernel) Write(b []byte) uint64 {
	off := k.Alloc(uint64(len(b)))
	if off != 0 {
		copy(k.arena[off-base:], b)
	}
	return off
}

// SetInput copies b into a block and makes it the call's input; an input
// that does not fit under the limit fails with ErrOutOfMemory.
func (k *Kernel) SetInput(b []byte) error {
	off, err := k.TryAlloc(uint64(len(b)))
	if err != nil {
		return fmt.Errorf("input of %d bytes: %w", len(b), err)
	}
	if off != 0 {
		copy(k.arena[off-base:], b)
	}
	k.input, k.inputLen = off, uint64(len(b))
	return nil
}

// Output returns the call's output block as the guest set it (offset and
// length, unchecked).
func (k *Kernel) Output() (off, n uint64) { return k.output, k.outputLen }

// Error returns the block the guest set as its error, or false when it
// set none.
func (k *Kernel) Error() ([]byte, bool) {
	if k.errPtr == 0 {
		return nil, false
	}
	b, _ := k.Block(k.errPtr)
	return b, true
}

// Memory returns the bytes the kernel's blocks span.
func (k *Kernel) Memory() uint64 { return uint64(len(k.arena)) }

func (k *Kernel) mustBytes(off, n uint64, what string) []byte {
	b, ok := k.Bytes(off, n)
	if !ok {
		panic(fmt.Sprintf("extism kernel: %s: %d bytes at %d are out of kernel memory", what, n, off))
	}
	return b
}

func (k *Kernel) loadU64(off uint64) uint64 {
	return binary.LittleEndian.Uint64(k.mustBytes(off, 8, "load_u64"))
}

func (k *Kernel) inputBytes(i, n uint64) []byte {
	if i > k.inputLen || n > k.inputLen-i {
		panic(fmt.Sprintf("extism kernel: input_load: %d bytes at %d past the input's %d", n, i, k.inputLen))
	}
	return k.mustBytes(k.input+i, n, "input_load")
}

func (k *Kernel) setVar(name string, v []byte) {
	if v == nil {
		delete(k.vars, name)
		return
	}
	size := len(name) + len(v)
	for kk, vv := range k.vars {
		if kk != name {
			size += len(kk) + len(vv)
		}
	}
	if size > maxVarBytes {
		panic(fmt.Sprintf("extism kernel: vars over their %d bytes", maxVarBytes))
	}
	if k.vars == nil {
		k.vars = map[string][]byte{}
	}
	k.vars[name] = v
}

type kernelKey struct{}

// WithKernel returns ctx carrying k: the env functions of a call made
// with it use k.
func WithKernel(ctx context.Context, k *Kernel) context.Context {
	return context.WithValue(ctx, kernelKey{}, k)
}

// FromContext returns the kernel of a call's context, or nil.
func FromContext(ctx context.Context) *Kernel {
	k, _ := ctx.Value(kernelKey{}).(*Kernel)
	return k
}

// must returns the kernel of ctx; a guest call without one is a host
// wiring bug, reported as a trap.
func must(ctx context.Context) *Kernel {
	k, ok := ctx.Value(kernelKey{}).(*Kernel)
	if !ok {
		panic("extism kernel: guest call without a kernel on its context")
	}
	return k
}
