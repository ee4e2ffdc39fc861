//go:build wasip1

package pdk

import "encoding/binary"

// The Extism guest ABI (the kernel functions of extism:host/env) that the
// exports and host calls of this package use, written here instead of
// importing github.com/extism/go-pdk: go-pdk links encoding/json (and with
// it reflect, strconv's float tables, os) into every plugin, about a fifth
// of a stock module. The calls are the ones go-pdk makes, so a plugin
// stays loadable by any Extism host. Plugin authors may still import
// go-pdk themselves.

//go:wasmimport extism:host/env input_length
func extismInputLength() uint64

//go:wasmimport extism:host/env input_load_u8
func extismInputLoadU8(offset uint64) uint32

//go:wasmimport extism:host/env input_load_u64
func extismInputLoadU64(offset uint64) uint64

//go:wasmimport extism:host/env output_set
func extismOutputSet(offset, length uint64)

//go:wasmimport extism:host/env error_set
func extismErrorSet(offset uint64)

//go:wasmimport extism:host/env config_get
func extismConfigGet(offset uint64) uint64

//go:wasmimport extism:host/env length
func extismLength(offset uint64) uint64

//go:wasmimport extism:host/env alloc
func extismAlloc(length uint64) uint64

//go:wasmimport extism:host/env free
func extismFree(offset uint64)

//go:wasmimport extism:host/env load_u8
func extismLoadU8(offset uint64) uint32

//go:wasmimport extism:host/env load_u64
func extismLoadU64(offset uint64) uint64

//go:wasmimport extism:host/env store_u8
func extismStoreU8(offset uint64, v uint32)

//go:wasmimport extism:host/env store_u64
func extismStoreU64(offset, v uint64)

// kernelBlock is a block of Extism kernel memory: its offset and length.
type kernelBlock struct {
	offset, length uint64
}

// allocBlock allocates n uninitialized bytes of kernel memory.
func allocBlock(n int) kernelBlock {
	return kernelBlock{offset: extismAlloc(uint64(n)), length: uint64(n)}
}

// allocBytes allocates a block of kernel memory holding b.
func allocBytes(b []byte) kernelBlock {
	m := allocBlock(len(b))
	m.store(b)
	return m
}

// findBlock returns the kernel block at offset (its length 0 when there is
// none).
func findBlock(offset uint64) kernelBlock {
	n := extismLength(offset)
	if n == 0 {
		return kernelBlock{}
	}
	return kernelBlock{offset: offset, length: n}
}

// store copies b into the block: whole words with store_u64, the tail
// byte by byte.
func (m kernelBlock) store(b []byte) {
	words := len(b) &^ 7
	for i := 0; i < words; i += 8 {
		extismStoreU64(m.offset+uint64(i), binary.LittleEndian.Uint64(b[i:]))
	}
	for i := words; i < len(b); i++ {
		extismStoreU8(m.offset+uint64(i), uint32(b[i]))
	}
}

// load copies the first len(b) bytes of the block into b.
func (m kernelBlock) load(b []byte) {
	words := len(b) &^ 7
	for i := 0; i < words; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], extismLoadU64(m.offset+uint64(i)))
	}
	for i := words; i < len(b); i++ {
		b[i] = uint8(extismLoadU8(m.offset + uint64(i)))
	}
}

// bytes returns a copy of the block.
func (m kernelBlock) bytes() []byte {
	b := make([]byte, m.length)
	m.load(b)
	return b
}

// free returns the block to the kernel.
func (m kernelBlock) free() { extismFree(m.offset) }

// extismInput returns the call's input.
func extismInput() []byte {
	n := int(extismInputLength())
	b := make([]byte, n)
	words := n &^ 7
	for i := 0; i < words; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], extismInputLoadU64(uint64(i)))
	}
	for i := words; i < n; i++ {
		b[i] = uint8(extismInputLoadU8(uint64(i)))
	}
	return b
}

// extismOutput sets the call's output to b.
func extismOutput(b []byte) {
	m := allocBytes(b)
	extismOutputSet(m.offset, m.length)
}

// extismSetError sets the call's error to err's text.
func extismSetError(err error) {
	m := allocBytes([]byte(err.Error()))
	extismErrorSet(m.offset)
}

// extismConfig returns the Extism config value of key, if set and not
// empty.
func extismConfig(key string) (string, bool) {
	k := allocBytes([]byte(key))
	defer k.free()
	off := extismConfigGet(k.offset)
	n := extismLength(off)
	if off == 0 || n == 0 {
		return "", false
	}
	v := make([]byte, n)
	kernelBlock{offset: off, length: n}.load(v)
	return string(v), true
}
