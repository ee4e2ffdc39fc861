package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// A plugin call is cut at its deadline by checks the host adds to the
// plugin at load time (instrumentModule), in place of wazero's
// WithCloseOnContextDone.
//
// The checks sit at every loop header and at the entry of every function:
// between two of them a guest runs a bounded stretch of straight-line
// code, whatever it does. Loops alone are not enough: a function that
// calls itself twice with no loop (rec(n){ rec(n-1); rec(n-1) }) runs 2^n
// calls without passing a loop header, and a chain of functions each
// calling the next twice does the same without recursion; such a call
// never stopped at its deadline, and the Go GC waiting for it to stop the
// world froze the whole host.
//
// wazero's option compiles, at every loop back-edge (and there only: not
// at function entries), an exit from the machine code into Go that reads
// the module's closed flag: an empty Go guest call takes tens of
// thousands of them (the guest runtime's own loops: allocation, clearing,
// copying), 10 of the 16 CPU-µs of an empty plugin call. The added check
// is a counter in a wasm global, decremented at every loop header and
// function entry (a few instructions of machine code); every
// interruptEvery of them it calls a host function that reads the call's
// context and traps when it is done. That call is also a point where the
// Go scheduler can preempt the goroutine (machine code cannot be
// preempted), so a plugin spinning does not keep the timers that end its
// context from running, nor the GC from stopping the world.
//
// The rewrite touches what is compiled, not the plugin: digest,
// signature, imports and exports shown are the file's. A module the
// rewriter does not know every instruction of (SIMD, threads, exceptions,
// ...) is refused at load (ErrNotInterruptible): wazero's own checks,
// at loop headers only, would leave it uninterruptible.
const (
	// interruptModule and interruptName are the host function the
	// rewritten loops call; outside abi.Namespace, so no plugin can import
	// it by a name the host checks.
	interruptModule = "fabric_interrupt"
	interruptName   = "check"
	// interruptEvery is how many loop headers and function entries run
	// between two checks of the context: a tight loop or a recursion
	// takes well under a millisecond for them.
	interruptEvery = 1 << 14
)

// errInterrupted traps a plugin call whose context is done.
var errInterrupted = errors.New("host: plugin call interrupted: its context is done")

// errCannotInstrument says instrumentModule left a module as it was.
var errCannotInstrument = errors.New("host: module not instrumented")

// ErrNotInterruptible is matched by the load of a plugin the host cannot
// make interruptible (see instrumentModule): it has an instruction the
// host's rewriter does not know (SIMD, threads, exceptions, ...), and
// wazero's own termination checks, at loop headers only, would let a
// recursion run past its deadline and stall the host.
var ErrNotInterruptible = errors.New("host: plugin cannot be made interruptible")

// checkInterrupt is the host function of the added checks: it traps
// the call once its context is done or its CPU budget spent (see
// cpuBudget).
func checkInterrupt(ctx context.Context, _ api.Module, _ []uint64) {
	if ctx.Err() != nil || budgetOfCall(ctx).spent() {
		panic(errInterrupted)
	}
}

// instantiateInterrupt adds checkInterrupt to rt, for modules that
// instrumentModule rewrote.
func instantiateInterrupt(ctx context.Context, rt wazero.Runtime) error {
	_, err := rt.NewHostModuleBuilder(interruptModule).NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(checkInterrupt), nil, nil).Export(interruptName).
		Instantiate(ctx)
	return err
}

// Wasm section ids.
const (
	secCustom = 0
	secType   = 1
	secImport = 2
	secGlobal = 6
	secExport = 7
	secStart  = 8
	secElem   = 9
	secCode   = 10
)

// interruptRewriter holds what the rewrite of one module needs: the index of
// the added import (defined functions move up by one) and of the counter
// global.
type interruptRewriter struct {
	funcImports uint32 // function imports before the added one: its index
	counter     uint32 // index of the added counter global
}

// fn maps a function index of the original module to the rewritten one.
func (r *interruptRewriter) fn(i uint32) uint32 {
	if i >= r.funcImports {
		return i + 1
	}
	return i
}

// instrumentModule returns b with a context check at every function
// entry and loop header (see interruptEvery): a function import
// (interruptModule.interruptName, appended to the imports, so every
// defined function's index moves up by one and each reference to one is
// renumbered), a mutable i32 global counting down, and at the start of
// each function body (after its locals) and of each loop body:
//
//	global.get $c; i32.eqz; if; call $check; i32.const N; global.set $c; end
//	global.get $c; i32.const 1; i32.sub; global.set $c
//
// The inserted block leaves the stack and the branch depths of the body
// as they were. The start function, _initialize and every export are
// defined functions: each gets the check. The name section keeps the module and function names
// (renumbered); its other subsections are dropped. errCannotInstrument
// (wrapped) when the module has something the rewriter does not know.
func instrumentModule(b []byte) ([]byte, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" || binary.LittleEndian.Uint32(b[4:8]) != 1 {
		return nil, fmt.Errorf("%w: not a wasm 1 module", errCannotInstrument)
	}
	type section struct {
		id   byte
		body []byte
	}
	var secs []section
	for i := 8; i < len(b); {
		id := b[i]
		size, n := binary.Uvarint(b[i+1:])
		if n <= 0 || size > uint64(len(b)-i-1-n) {
			return nil, fmt.Errorf("%w: section at %d: bad size", errCannotInstrument, i)
		}
		body := b[i+1+n : i+1+n+int(size)]
		secs = append(secs, section{id, body})
		i += 1 + n + int(size)
	}
	// First pass: count types, function imports and globals.
	r := &interruptRewriter{}
	var types, globals uint32
	var haveType, haveImport bool
	for _, s := range secs {
		switch s.id {
		case secType:
			haveType = true
			c, _, err := readU32(s.body)
			if err != nil {
				return nil, err
			}
			types = c
		case secImport:
			haveImport = true
			funcs, gl, err := countImports(s.body)
			if err != nil {
				return nil, err
			}
			r.funcImports, globals = funcs, globals+gl
		case secGlobal:
			c, _, err := readU32(s.body)
			if err != nil {
				return nil, err
			}
			globals += c
		case 13: // tags (exceptions)
			return nil, fmt.Errorf("%w: section %d", errCannotInstrument, s.id)
		}
	}
	if !haveType || !haveImport {
		return nil, fmt.Errorf("%w: no type or import section", errCannotInstrument)
	}
	r.counter = globals
	out := append(make([]byte, 0, len(b)+len(b)/8), b[:8]...)
	wroteGlobal := false
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	for _, s := range secs {
		if !wroteGlobal && s.id != secCustom && s.id > secGlobal {
			// No global section: one with the counter alone, before
			// the export section (section order).
			emit(secGlobal, appendCounter([]byte{1}))
			wroteGlobal = true
		}
		var body []byte
		var err error
		switch s.id {
		case secType:
			body = binary.AppendUvarint(nil, uint64(types+1))
			_, n, _ := readU32(s.body)
			body = append(body, s.body[n:]...)
			body = append(body, 0x60, 0x00, 0x00) // func () -> ()
		case secImport:
			c, n, _ := readU32(s.body)
			body = binary.AppendUvarint(nil, uint64(c+1))
			body = append(body, s.body[n:]...)
			body = appendName(body, interruptModule)
			body = appendName(body, interruptName)
			body = append(body, 0x00)
			body = binary.AppendUvarint(body, uint64(types))
		case secGlobal:
			body, err = r.globals(s.body)
			wroteGlobal = true
		case secExport:
			body, err = r.exports(s.body)
		case secStart:
			var i uint32
			if i, _, err = readU32(s.body); err == nil {
				body = binary.AppendUvarint(nil, uint64(r.fn(i)))
			}
		case secElem:
			body, err = r.elems(s.body)
		case secCode:
			body, err = r.code(s.body)
		case secCustom:
			name, n, nerr := readName(s.body)
			if nerr != nil || name != "name" {
				body = s.body
				break
			}
			body, err = r.names(s.body, n)
		default:
			body = s.body
		}
		if err != nil {
			return nil, err
		}
		emit(s.id, body)
	}
	if !wroteGlobal {
		emit(secGlobal, appendCounter([]byte{1}))
	}
	return out, nil
}

// appendCounter appends the counter global's entry: a mutable i32
// starting at interruptEvery.
func appendCounter(b []byte) []byte {
	b = append(b, 0x7F, 0x01, 0x41) // i32, mutable, i32.const
	b = appendSLEB(b, interruptEvery)
	return append(b, 0x0B)
}

// globals rewrites the global section (ref.func in initialisers) and
// appends the counter.
func (r *interruptRewriter) globals(b []byte) ([]byte, error) {
	c, n, err := readU32(b)
	if err != nil {
		return nil, err
	}
	out := binary.AppendUvarint(nil, uint64(c+1))
	b = b[n:]
	for range c {
		// valtype, mutability, init expression
		if len(b) < 2 {
			return nil, fmt.Errorf("%w: global: short", errCannotInstrument)
		}
		out = append(out, b[0], b[1])
		b = b[2:]
		if out, b, err = r.expr(out, b); err != nil {
			return nil, err
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: global: trailing bytes", errCannotInstrument)
	}
	return appendCounter(out), nil
}

// exports renumbers function exports.
func (r *interruptRewriter) exports(b []byte) ([]byte, error) {
	c, n, err := readU32(b)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), b[:n]...)
	b = b[n:]
	for range c {
		_, nn, err := readName(b)
		if err != nil || len(b) < nn+1 {
			return nil, fmt.Errorf("%w: export: short", errCannotInstrument)
		}
		kind := b[nn]
		out = append(out, b[:nn+1]...)
		b = b[nn+1:]
		idx, in, err := readU32(b)
		if err != nil {
			return nil, err
		}
		if kind == 0 {
			idx = r.fn(idx)
		}
		out = binary.AppendUvarint(out, uint64(idx))
		b = b[in:]
	}
	return out, nil
}

// elems renumbers the function indices of element segments (all eight
// encodings).
func (r *interruptRewriter) elems(b []byte) ([]byte, error) {
	c, n, err := readU32(b)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), b[:n]...)
	b = b[n:]
	u32 := func() (uint32, error) {
		v, n, err := readU32(b)
		if err == nil {
			out = binary.AppendUvarint(out, uint64(v))
			b = b[n:]
		}
		return v, err
	}
	one := func() error {
		if len(b) == 0 {
			return fmt.Errorf("%w: elem: short", errCannotInstrument)
		}
		out = append(out, b[0])
		b = b[1:]
		return nil
	}
	for range c {
		flags, err := u32()
		if err != nil {
			return nil, err
		}
		if flags > 7 {
			return nil, fmt.Errorf("%w: elem flags %d", errCannotInstrument, flags)
		}
		if flags&2 != 0 && flags&1 == 0 { // explicit table index
			if _, err := u32(); err != nil {
				return nil, err
			}
		}
		if flags&1 == 0 { // active: offset expression
			if out, b, err = r.expr(out, b); err != nil {
				return nil, err
			}
		}
		if flags&3 != 0 { // elemkind or reftype
			if err := one(); err != nil {
				return nil, err
			}
		}
		items, err := u32()
		if err != nil {
			return nil, err
		}
		for range items {
			if flags&4 != 0 {
				if out, b, err = r.expr(out, b); err != nil {
					return nil, err
				}
				continue
			}
			idx, n, err := readU32(b)
			if err != nil {
				return nil, err
			}
			out = binary.AppendUvarint(out, uint64(r.fn(idx)))
			b = b[n:]
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: elem: trailing bytes", errCannotInstrument)
	}
	return out, nil
}

// code rewrites every function body: the check at its entry, then its
// instructions (instrs).
func (r *interruptRewriter) code(b []byte) ([]byte, error) {
	c, n, err := readU32(b)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len(b)/8)
	out = append(out, b[:n]...)
	b = b[n:]
	var body []byte
	for range c {
		size, n, err := readU32(b)
		if err != nil || uint64(size) > uint64(len(b)-n) {
			return nil, fmt.Errorf("%w: code: bad body size", errCannotInstrument)
		}
		fb := b[n : n+int(size)]
		b = b[n+int(size):]
		// locals: vec(count u32, valtype)
		lc, ln, err := readU32(fb)
		if err != nil {
			return nil, err
		}
		at := ln
		for range lc {
			_, m, err := readU32(fb[at:])
			if err != nil || at+m >= len(fb) {
				return nil, fmt.Errorf("%w: code: bad locals", errCannotInstrument)
			}
			at += m + 1
		}
		body = append(body[:0], fb[:at]...)
		body = r.appendCheck(body)
		if body, err = r.instrs(body, fb[at:]); err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: code: trailing bytes", errCannotInstrument)
	}
	return out, nil
}

// names renumbers the name section's function names (subsection 1) and
// keeps the module name (0); the other subsections are dropped. n is the
// length of the section's own name.
func (r *interruptRewriter) names(b []byte, n int) ([]byte, error) {
	out := append([]byte(nil), b[:n]...)
	b = b[n:]
	for len(b) > 0 {
		id := b[0]
		size, m := binary.Uvarint(b[1:])
		if m <= 0 || size > uint64(len(b)-1-m) {
			return nil, fmt.Errorf("%w: name section: bad subsection", errCannotInstrument)
		}
		sub := b[1+m : 1+m+int(size)]
		b = b[1+m+int(size):]
		switch id {
		case 0:
			out = append(out, 0)
			out = binary.AppendUvarint(out, uint64(len(sub)))
			out = append(out, sub...)
		case 1:
			c, cn, err := readU32(sub)
			if err != nil {
				return nil, err
			}
			nb := binary.AppendUvarint(nil, uint64(c))
			sub = sub[cn:]
			for range c {
				idx, in, err := readU32(sub)
				if err != nil {
					return nil, err
				}
				_, nn, err := readName(sub[in:])
				if err != nil {
					return nil, err
				}
				nb = binary.AppendUvarint(nb, uint64(r.fn(idx)))
				nb = append(nb, sub[in:in+nn]...)
				sub = sub[in+nn:]
			}
			out = append(out, 1)
			out = binary.AppendUvarint(out, uint64(len(nb)))
			out = append(out, nb...)
		}
	}
	return out, nil
}

// expr copies a constant expression (up to and with its end), renumbering
// ref.func.
func (r *interruptRewriter) expr(out, b []byte) ([]byte, []byte, error) {
	for {
		if len(b) == 0 {
			return nil, nil, fmt.Errorf("%w: unterminated expression", errCannotInstrument)
		}
		if b[0] == 0x0B {
			return append(out, 0x0B), b[1:], nil
		}
		var n int
		var err error
		if out, n, err = r.instr(out, b); err != nil {
			return nil, nil, err
		}
		b = b[n:]
	}
}

// instrs copies a function body's instructions, renumbering function
// references and adding the counter check at the head of each loop.
func (r *interruptRewriter) instrs(out, b []byte) ([]byte, error) {
	for len(b) > 0 {
		n := 0
		var err error
		loop := b[0] == 0x03
		if out, n, err = r.instr(out, b); err != nil {
			return nil, err
		}
		b = b[n:]
		if loop {
			out = r.appendCheck(out)
		}
	}
	return out, nil
}

// appendCheck appends the counter check (see instrumentModule).
func (r *interruptRewriter) appendCheck(out []byte) []byte {
	g := func(op byte) {
		out = append(out, op)
		out = binary.AppendUvarint(out, uint64(r.counter))
	}
	g(0x23)                       // global.get $c
	out = append(out, 0x45)       // i32.eqz
	out = append(out, 0x04, 0x40) // if (no result)
	out = append(out, 0x10)       // call $check
	out = binary.AppendUvarint(out, uint64(r.funcImports))
	out = append(out, 0x41) // i32.const N
	out = appendSLEB(out, interruptEvery)
	g(0x24)                       // global.set $c
	out = append(out, 0x0B)       // end
	g(0x23)                       // global.get $c
	out = append(out, 0x41, 0x01) // i32.const 1
	out = append(out, 0x6B)       // i32.sub
	g(0x24)                       // global.set $c
	return out
}

// instr copies one instruction from b to out, renumbering a function
// index (call, return_call, ref.func), and returns how many bytes of b it
// took. An opcode it does not know is errCannotInstrument.
func (r *interruptRewriter) instr(out, b []byte) ([]byte, int, error) {
	op := b[0]
	at := 1
	skip := func(k int) error { // k LEB128 immediates
		for range k {
			m := lebLen(b[at:])
			if m == 0 {
				return fmt.Errorf("%w: opcode %#x: bad immediate", errCannotInstrument, op)
			}
			at += m
		}
		return nil
	}
	var err error
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == 0x0B, op == 0x0F, op == 0x1A, op == 0x1B,
		op >= 0x45 && op <= 0xC4, op == 0xD1:
	case op >= 0x02 && op <= 0x04: // block, loop, if: blocktype (s33)
		err = skip(1)
	case op == 0x0C, op == 0x0D, op >= 0x20 && op <= 0x26, op == 0x3F, op == 0x40, op == 0x41, op == 0x42, op == 0xD0:
		err = skip(1)
	case op == 0x0E: // br_table
		var c uint32
		var n int
		if c, n, err = readU32(b[at:]); err == nil {
			at += n
			err = skip(int(c) + 1)
		}
	case op == 0x10, op == 0x12, op == 0xD2: // call, return_call, ref.func
		var idx uint32
		var n int
		if idx, n, err = readU32(b[at:]); err != nil {
			return nil, 0, err
		}
		out = append(out, op)
		out = binary.AppendUvarint(out, uint64(r.fn(idx)))
		return out, at + n, nil
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
		err = skip(2)
	case op == 0x1C: // select t*
		var c uint32
		var n int
		if c, n, err = readU32(b[at:]); err == nil {
			at += n + int(c)
		}
	case op >= 0x28 && op <= 0x3E: // memarg
		var align uint32
		var n int
		if align, n, err = readU32(b[at:]); err == nil {
			at += n
			k := 1
			if align&0x40 != 0 { // multi-memory: a memory index
				k = 2
			}
			err = skip(k)
		}
	case op == 0x43:
		at += 4
	case op == 0x44:
		at += 8
	case op == 0xFC:
		var sub uint32
		var n int
		if sub, n, err = readU32(b[at:]); err != nil {
			break
		}
		at += n
		switch {
		case sub <= 7:
		case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17:
			err = skip(1)
		case sub == 8, sub == 10, sub == 12, sub == 14:
			err = skip(2)
		default:
			err = fmt.Errorf("%w: opcode 0xfc %d", errCannotInstrument, sub)
		}
	default:
		err = fmt.Errorf("%w: opcode %#x", errCannotInstrument, op)
	}
	if err != nil {
		return nil, 0, err
	}
	if at > len(b) {
		return nil, 0, fmt.Errorf("%w: opcode %#x: truncated", errCannotInstrument, op)
	}
	return append(out, b[:at]...), at, nil
}

// countImports counts the function and global imports of an import
// section.
func countImports(b []byte) (funcs, globals uint32, err error) {
	c, n, err := readU32(b)
	if err != nil {
		return 0, 0, err
	}
	b = b[n:]
	for range c {
		for range 2 { // module, name
			_, nn, err := readName(b)
			if err != nil {
				return 0, 0, err
			}
			b = b[nn:]
		}
		if len(b) == 0 {
			return 0, 0, fmt.Errorf("%w: import: short", errCannotInstrument)
		}
		kind := b[0]
		b = b[1:]
		switch kind {
		case 0: // func: type index
			funcs++
			_, n, err = readU32(b)
		case 1: // table: reftype, limits
			if len(b) == 0 {
				return 0, 0, fmt.Errorf("%w: import: short", errCannotInstrument)
			}
			b = b[1:]
			n, err = limitsLen(b)
		case 2: // memory: limits
			n, err = limitsLen(b)
		case 3: // global: valtype, mutability
			globals++
			n = 2
		default:
			return 0, 0, fmt.Errorf("%w: import kind %d", errCannotInstrument, kind)
		}
		if err != nil || n > len(b) {
			return 0, 0, fmt.Errorf("%w: import: short", errCannotInstrument)
		}
		b = b[n:]
	}
	return funcs, globals, nil
}

// limitsLen is the length of a limits encoding at the start of b.
func limitsLen(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: limits: short", errCannotInstrument)
	}
	at := 1
	k := 1
	if b[0]&1 != 0 {
		k = 2
	}
	for range k {
		m := lebLen(b[at:])
		if m == 0 {
			return 0, fmt.Errorf("%w: limits: bad", errCannotInstrument)
		}
		at += m
	}
	return at, nil
}

// readU32 reads an unsigned LEB128 u32.
func readU32(b []byte) (uint32, int, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n > 5 || v > 1<<32-1 {
		return 0, 0, fmt.Errorf("%w: bad u32", errCannotInstrument)
	}
	return uint32(v), n, nil
}

// readName reads a length-prefixed name and returns it with the bytes it
// took.
func readName(b []byte) (string, int, error) {
	l, n, err := readU32(b)
	if err != nil || uint64(l) > uint64(len(b)-n) {
		return "", 0, fmt.Errorf("%w: bad name", errCannotInstrument)
	}
	return string(b[n : n+int(l)]), n + int(l), nil
}

// appendName appends s as a wasm name.
func appendName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendSLEB appends v in signed LEB128, as i32.const takes it
// (binary.AppendVarint's zigzag encoding would read as 2v).
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// lebLen is the length of the LEB128 number at the start of b (signed or
// unsigned), 0 when it is cut or longer than 10 bytes.
func lebLen(b []byte) int {
	for i := 0; i < len(b) && i < 10; i++ {
		if b[i]&0x80 == 0 {
			return i + 1
		}
	}
	return 0
}
