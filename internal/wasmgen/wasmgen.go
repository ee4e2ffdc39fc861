// Package wasmgen hand-builds minimal fabric plugin modules, byte by
// byte, for the host's tests: valid plugins (the exports the host
// requires, the Extism imports a guest returns its output through, a
// manifest of its own) whose code does what no Go guest can be written
// to do, such as recurse without a single loop.
package wasmgen

import (
	"encoding/binary"
	"fmt"

	"github.com/fabric-host/fabric/abi"
)

// Where names the export of a Recursive module that recurses.
type Where string

// The exports a Recursive module can recurse in.
const (
	InScan       Where = abi.ExportScan
	InManifest   Where = abi.ExportManifest
	InInitialize Where = "_initialize"
	// InStart recurses in the module's start function, which wazero runs
	// as it instantiates the module (a Go guest has none).
	InStart Where = "start"
)

// Extism kernel imports the module calls, and the function indices of
// its own functions after them.
const (
	fnAlloc = iota // extism:host/env alloc(i64) i64
	fnStoreU64
	fnOutputSet
	fnInitialize
	fnManifest
	fnScan
	fnRec
	fnStart
)

// Type indices.
const (
	typeVoid     = iota // () -> ()
	typeStatus          // () -> i32
	typeAlloc           // (i64) -> i64
	typeStore           // (i64, i64) -> ()
	typeRecParam        // (i32) -> ()
)

// Opcodes used.
const (
	opIf       = 0x04
	opEnd      = 0x0B
	opReturn   = 0x0F
	opCall     = 0x10
	opLocalGet = 0x20
	opLocalSet = 0x21
	opI32Const = 0x41
	opI64Const = 0x42
	opI32Eqz   = 0x45
	opI32Sub   = 0x6B
	opI64Add   = 0x7C
	valI32     = 0x7F
	valI64     = 0x7E
	blockVoid  = 0x40
)

// Recursive returns a plugin module named name (a scanner with a 200 ms
// timeout) whose export at first calls rec(depth), where
//
//	rec(n) { if n == 0 { return }; rec(n-1); rec(n-1) }
//
// 2^(depth+1)-1 calls and no loop anywhere in the module: depth 60 runs
// for centuries, depth 3 returns at once. Otherwise the module is a
// well-behaved plugin: _initialize does nothing, fabric_manifest returns
// the manifest through the Extism kernel (alloc, store_u64, output_set)
// and fabric_scan returns status 0 with no output. Only with InStart
// has the module a start function.
func Recursive(name string, at Where, depth int32) ([]byte, error) {
	switch at {
	case InScan, InManifest, InInitialize, InStart:
	default:
		return nil, fmt.Errorf("wasmgen: recurse in %q: want %s, %s, %s or %s", at, InScan, InManifest, InInitialize, InStart)
	}
	man := abi.Manifest{ABI: abi.Version, Name: name, Version: "1.0.0", IntervalMs: 100, TimeoutMs: 200}
	man.ApplyDefaults()
	if err := man.Validate(); err != nil {
		return nil, fmt.Errorf("wasmgen: manifest of %q: %w", name, err)
	}
	manifest, err := man.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("wasmgen: manifest of %q: %w", name, err)
	}
	recurse := func() []byte {
		return op(opI32Const, sleb(int64(depth)), op(opCall, uleb(fnRec)))
	}
	var initBody, manBody, scanBody, startBody, start []byte
	switch at {
	case InStart:
		startBody = recurse()
		start = section(8, uleb(fnStart))
	case InInitialize:
		initBody = recurse()
	case InManifest:
		manBody = recurse()
	case InScan:
		scanBody = recurse()
	}
	manBody = append(manBody, writeOutput(manifest)...)
	manBody = append(manBody, op(opI32Const, sleb(0))...)
	scanBody = append(scanBody, op(opI32Const, sleb(0))...)
	rec := cat(
		op(opLocalGet, uleb(0)), op(opI32Eqz), op(opIf, []byte{blockVoid}), op(opReturn), op(opEnd),
		op(opLocalGet, uleb(0)), op(opI32Const, sleb(1)), op(opI32Sub), op(opCall, uleb(fnRec)),
		op(opLocalGet, uleb(0)), op(opI32Const, sleb(1)), op(opI32Sub), op(opCall, uleb(fnRec)),
	)
	env := func(field string, typ uint32) []byte {
		return cat(wname("extism:host/env"), wname(field), []byte{0x00}, uleb(typ))
	}
	export := func(field string, kind byte, idx uint32) []byte {
		return cat(wname(field), []byte{kind}, uleb(idx))
	}
	names := cat(wname("name"), section(1, vec(
		cat(uleb(fnInitialize), wname("_initialize")), cat(uleb(fnManifest), wname("fabric_manifest")),
		cat(uleb(fnScan), wname("fabric_scan")), cat(uleb(fnRec), wname("rec")), cat(uleb(fnStart), wname("start")),
	)))
	return cat([]byte("\x00asm\x01\x00\x00\x00"),
		section(1, vec( // types
			[]byte{0x60, 0, 0},
			[]byte{0x60, 0, 1, valI32},
			[]byte{0x60, 1, valI64, 1, valI64},
			[]byte{0x60, 2, valI64, valI64, 0},
			[]byte{0x60, 1, valI32, 0},
		)),
		section(2, vec(env("alloc", typeAlloc), env("store_u64", typeStore), env("output_set", typeStore))),
		section(3, vec(uleb(typeVoid), uleb(typeStatus), uleb(typeStatus), uleb(typeRecParam), uleb(typeVoid))),
		section(5, vec([]byte{0x00, 1})), // one memory of one page
		section(7, vec(export("memory", 2, 0), export("_initialize", 0, fnInitialize),
			export(abi.ExportManifest, 0, fnManifest), export(abi.ExportScan, 0, fnScan))),
		start,
		section(10, vec(
			code(nil, initBody),
			code([]byte{1, 1, valI64}, manBody), // one i64 local: the output block
			code(nil, scanBody),
			code(nil, rec),
			code(nil, startBody),
		)),
		section(0, names),
	), nil
}

// writeOutput is the code that makes b the call's output: a kernel block
// of len(b) bytes filled 8 at a time (the kernel rounds blocks up to 8
// bytes), with no loop.
func writeOutput(b []byte) []byte {
	out := op(opI64Const, sleb(int64(len(b))), op(opCall, uleb(fnAlloc)), op(opLocalSet, uleb(0)))
	for at := 0; at < len(b); at += 8 {
		var word [8]byte
		copy(word[:], b[at:])
		out = append(out, cat(
			op(opLocalGet, uleb(0)), op(opI64Const, sleb(int64(at))), op(opI64Add),
			op(opI64Const, sleb(int64(binary.LittleEndian.Uint64(word[:])))), op(opCall, uleb(fnStoreU64)),
		)...)
	}
	return append(out, cat(op(opLocalGet, uleb(0)), op(opI64Const, sleb(int64(len(b)))), op(opCall, uleb(fnOutputSet)))...)
}

// op is an opcode followed by its immediates.
func op(code byte, imm ...[]byte) []byte { return cat(append([][]byte{{code}}, imm...)...) }

// code is a function body: its locals (an encoded vector, nil for none),
// its instructions and the closing end, prefixed by its size.
func code(locals, instrs []byte) []byte {
	if locals == nil {
		locals = []byte{0}
	}
	body := cat(locals, instrs, []byte{opEnd})
	return cat(uleb(uint32(len(body))), body)
}

// section is a section: its id, size and body.
func section(id byte, body []byte) []byte {
	return cat([]byte{id}, uleb(uint32(len(body))), body)
}

// vec is a vector: its count, then its items.
func vec(items ...[]byte) []byte {
	return cat(uleb(uint32(len(items))), cat(items...))
}

// wname is a wasm name: its length, then its bytes.
func wname(s string) []byte { return cat(uleb(uint32(len(s))), []byte(s)) }

func uleb(v uint32) []byte { return binary.AppendUvarint(nil, uint64(v)) }

// sleb is v in signed LEB128, as i32.const and i64.const take it.
func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}
