package host

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Errors of the static module check, run before anything is compiled.
var (
	// ErrNotWasm: the file does not start with the wasm magic and version 1.
	ErrNotWasm = errors.New("host: not a wasm module")
	// ErrTruncated: a section runs past the end of the file (a half-written
	// or cut file).
	ErrTruncated = errors.New("host: wasm module is truncated or corrupt")
	// ErrMissingExport: a required export is absent.
	ErrMissingExport = errors.New("host: plugin lacks a required export")
	// ErrUnknownImport: the module imports a fabric host function this host
	// does not provide.
	ErrUnknownImport = errors.New("host: plugin imports an unknown host function")
)

// moduleShape is what the static check learns from a module's bytes.
type moduleShape struct {
	Exports []string
	// Imports are "module.name" of every function import.
	Imports []string
}

// readModuleShape walks the section headers of b and decodes the import and
// export sections. It does not validate code; wazero does that at compile.
func readModuleShape(b []byte) (moduleShape, error) {
	var s moduleShape
	if len(b) < 8 || string(b[:4]) != "\x00asm" || binary.LittleEndian.Uint32(b[4:8]) != 1 {
		return s, ErrNotWasm
	}
	r := &wasmReader{b: b, off: 8}
	for r.off < len(b) {
		id := r.byte()
		size := r.u32()
		if r.err != nil {
			return s, fmt.Errorf("%w: bad section header at byte %d", ErrTruncated, r.off)
		}
		if r.off+int(size) > len(b) {
			return s, fmt.Errorf("%w: section %d at byte %d needs %d bytes, %d left", ErrTruncated, id, r.off, size, len(b)-r.off)
		}
		body := &wasmReader{b: b[r.off : r.off+int(size)]}
		r.off += int(size)
		switch id {
		case 2:
			s.Imports = body.imports()
		case 7:
			s.Exports = body.exports()
		}
		if body.err != nil {
			return s, fmt.Errorf("%w: section %d: %v", ErrTruncated, id, body.err)
		}
	}
	return s, nil
}

type wasmReader struct {
	b   []byte
	off int
	err error
}

func (r *wasmReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("bad %s at byte %d", what, r.off)
	}
}

func (r *wasmReader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail("byte")
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *wasmReader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 || v > 0xffffffff {
		r.fail("leb128")
		return 0
	}
	r.off += n
	return uint32(v)
}

func (r *wasmReader) name() string {
	n := int(r.u32())
	if r.err != nil || r.off+n > len(r.b) {
		r.fail("name")
		return ""
	}
	s := string(r.b[r.off : r.off+n])
	r.off += n
	return s
}

func (r *wasmReader) limits() {
	if flags := r.byte(); flags&1 != 0 {
		r.u32()
		r.u32()
	} else {
		r.u32()
	}
}

func (r *wasmReader) imports() []string {
	var out []string
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		mod, name := r.name(), r.name()
		switch kind := r.byte(); kind {
		case 0: // func: type index
			r.u32()
			out = append(out, mod+"."+name)
		case 1: // table: reftype, limits
			r.byte()
			r.limits()
		case 2: // memory: limits
			r.limits()
		case 3: // global: valtype, mutability
			r.byte()
			r.byte()
		default:
			r.fail("import kind")
		}
	}
	return out
}

func (r *wasmReader) exports() []string {
	var out []string
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		name := r.name()
		r.byte()
		r.u32()
		out = append(out, name)
	}
	return out
}
