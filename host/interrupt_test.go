package host

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// wasmSec is a section: id, then its size and body.
func wasmSec(id byte, body ...byte) []byte {
	return append(binary.AppendUvarint([]byte{id}, uint64(len(body))), body...)
}

// wasmVec is a vector: its count, then its items.
func wasmVec(items ...[]byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

func wasmName(s string) []byte { return appendName(nil, s) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// loopModule is a module with what the rewrite renumbers: an imported
// function (env.ext, adds one), a global of its own, a table filled by an
// element segment, direct and indirect calls, exports and function names.
// count() loops 100 000 times (two calls a round) and returns 200 001;
// spin() loops forever; deep() calls rec(60), which calls itself twice
// with no loop (2^61 calls: forever too).
func loopModule() []byte {
	code := func(locals []byte, instrs ...byte) []byte {
		body := append(locals, instrs...)
		return append(binary.AppendUvarint(nil, uint64(len(body))), body...)
	}
	count := code([]byte{1, 1, 0x7F}, // one i32 local
		0x03, 0x40, // loop
		0x20, 0, 0x41, 0, 0x11, 1, 0, // local.get 0; i32.const 0; call_indirect type 1 table 0 (inc)
		0x10, 2, // call inc
		0x22, 0, // local.tee 0
		0x41, 0xC0, 0x9A, 0x0C, // i32.const 200000
		0x49,    // i32.lt_u
		0x0D, 0, // br_if 0
		0x0B,             // end
		0x20, 0, 0x10, 0, // local.get 0; call ext
		0x23, 0, 0x6A, // global.get 0; i32.add (the global is 0)
		0x0B)
	inc := code([]byte{0}, 0x20, 0, 0x41, 1, 0x6A, 0x0B)
	spin := code([]byte{0}, 0x03, 0x40, 0x0C, 0, 0x0B, 0x0B)
	deep := code([]byte{0}, 0x41, 60, 0x10, 5, 0x1A, 0x0B) // i32.const 60; call rec; drop
	rec := code([]byte{0},
		0x20, 0, 0x45, 0x04, 0x40, 0x41, 0, 0x0F, 0x0B, // if n == 0 { return 0 }
		0x20, 0, 0x41, 1, 0x6B, 0x10, 5, 0x1A, // rec(n-1); drop
		0x20, 0, 0x41, 1, 0x6B, 0x10, 5, // rec(n-1)
		0x0B)
	names := cat(wasmName("name"), []byte{1}, nil)
	fnames := wasmVec(cat([]byte{1}, wasmName("count")), cat([]byte{2}, wasmName("inc")), cat([]byte{3}, wasmName("spin")),
		cat([]byte{4}, wasmName("deep")), cat([]byte{5}, wasmName("rec")))
	names = append(binary.AppendUvarint(names, uint64(len(fnames))), fnames...)
	return cat([]byte("\x00asm\x01\x00\x00\x00"),
		wasmSec(1, wasmVec([]byte{0x60, 0, 1, 0x7F}, []byte{0x60, 1, 0x7F, 1, 0x7F}, []byte{0x60, 0, 0})...),
		wasmSec(2, wasmVec(cat(wasmName("env"), wasmName("ext"), []byte{0, 1}))...),
		wasmSec(3, wasmVec([]byte{0}, []byte{1}, []byte{2}, []byte{2}, []byte{1})...),
		wasmSec(4, wasmVec([]byte{0x70, 0, 1})...),
		wasmSec(6, wasmVec([]byte{0x7F, 1, 0x41, 0, 0x0B})...),
		wasmSec(7, wasmVec(cat(wasmName("count"), []byte{0, 1}), cat(wasmName("spin"), []byte{0, 3}), cat(wasmName("deep"), []byte{0, 4}))...),
		wasmSec(9, wasmVec(cat([]byte{0, 0x41, 0, 0x0B}, wasmVec([]byte{2})))...),
		wasmSec(10, wasmVec(count, inc, spin, deep, rec)...),
		wasmSec(0, names...),
	)
}

// runLoopModule instantiates b with env.ext and, when instrumented, the
// interrupt check, and calls export.
func runLoopModule(t *testing.T, ctx context.Context, b []byte, instrumented bool, export string) ([]uint64, error) {
	t.Helper()
	rt := wazero.NewRuntime(context.Background())
	t.Cleanup(func() { rt.Close(context.Background()) })
	_, err := rt.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, s []uint64) { s[0]++ }), []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("ext").Instantiate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if instrumented {
		if err := instantiateInterrupt(context.Background(), rt); err != nil {
			t.Fatal(err)
		}
	}
	mod, err := rt.Instantiate(context.Background(), b)
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	return mod.ExportedFunction(export).Call(ctx)
}

// TestInstrumentLoopsKeepsBehaviour: the rewritten module computes what
// the original does (calls renumbered, direct, indirect and through the
// import) and a trap in it still names its functions.
func TestInstrumentLoopsKeepsBehaviour(t *testing.T) {
	orig := loopModule()
	want, err := runLoopModule(t, context.Background(), orig, false, "count")
	if err != nil || want[0] != 200001 {
		t.Fatalf("original module: %v %v, want 200001", want, err)
	}
	b, err := instrumentModule(orig)
	if err != nil {
		t.Fatal(err)
	}
	// The counter starts at interruptEvery (16384: 0x80 0x80 0x01 in
	// signed LEB128).
	if !strings.Contains(string(b), "\x7f\x01\x41\x80\x80\x01\x0b") {
		t.Errorf("no counter global starting at %d", interruptEvery)
	}
	got, err := runLoopModule(t, context.Background(), b, true, "count")
	if err != nil || got[0] != want[0] {
		t.Fatalf("instrumented module: %v %v, want %v", got, err, want)
	}
	// A deadline cuts spin; its stack names it (the name section moved
	// with the functions).
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = runLoopModule(t, ctx, b, true, "spin")
	if err == nil || !strings.Contains(err.Error(), errInterrupted.Error()) {
		t.Fatalf("spin under a deadline: %v, want %v", err, errInterrupted)
	}
	if !strings.Contains(err.Error(), "spin") {
		t.Errorf("trap does not name the function: %v", err)
	}
}

// TestInstrumentedLoopTimesOutOnOneProc: a plugin spinning in a loop is
// cut at its deadline even when it holds the only P (machine code cannot
// be preempted; the check's host call is where the timer gets to run).
func TestInstrumentedLoopTimesOutOnOneProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	b, err := instrumentModule(loopModule())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := runLoopModule(t, ctx, b, true, "spin"); err == nil {
		t.Fatal("spin returned without an error")
	}
	if ctx.Err() == nil {
		t.Fatal("spin ended before its deadline")
	}
}

// TestInstrumentedRecursionTimesOut: a call that recurses without a loop
// is cut at its deadline, also when it holds the only P: the check at
// every function entry traps it and lets the timer run. Uninstrumented,
// or with checks at loop headers only, it runs 2^61 calls (run in a
// child process: such a call freezes the process that makes it).
func TestInstrumentedRecursionTimesOut(t *testing.T) {
	if !inChild(t, 30*time.Second) {
		return
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	b, err := instrumentModule(loopModule())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = runLoopModule(t, ctx, b, true, "deep")
	if err == nil || !strings.Contains(err.Error(), errInterrupted.Error()) || !strings.Contains(err.Error(), "rec") {
		t.Fatalf("deep under a deadline: %v, want %v in rec", err, errInterrupted)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("deep was cut %s after its 50ms deadline", d)
	}
}

// TestInstrumentLoopsStockPlugins: every plugin the build makes is
// rewritten (one that could not be would be refused at load), and got
// its checks.
func TestInstrumentLoopsStockPlugins(t *testing.T) {
	for _, name := range []string{"loop", "healthy", "swap_v1", "delayed_promoter"} {
		b, err := os.ReadFile(benchFixture(t, name))
		if err != nil {
			t.Fatal(err)
		}
		out, err := instrumentModule(compactData(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(out) <= len(b)/2 || !strings.Contains(string(out), interruptModule) {
			t.Errorf("%s: rewritten module of %d bytes (from %d) lacks the %s import", name, len(out), len(b), interruptModule)
		}
	}
}

// TestInstrumentLoopsRefusesUnknown: an opcode the rewriter does not know
// leaves the module uninstrumented, and the loader refuses it
// (ErrNotInterruptible) rather than run it with wazero's checks, which sit
// at loop headers only.
func TestInstrumentLoopsRefusesUnknown(t *testing.T) {
	b := loopModule()
	// Replace spin's "br 0" (0x0C 0x00) with a SIMD prefix and operand.
	i := strings.Index(string(b), "\x03\x40\x0c\x00\x0b\x0b")
	if i < 0 {
		t.Fatal("spin's body not found")
	}
	b[i+2] = 0xFD
	if _, err := instrumentModule(b); !errors.Is(err, errCannotInstrument) {
		t.Fatalf("instrumentModule: %v, want errCannotInstrument", err)
	}
	for _, interpret := range []bool{false, true} {
		lc := benchLoader(t, nil)
		lc.interpret = interpret
		m, err := compileModule(context.Background(), b, "", 0, lc)
		if err == nil {
			m.Close(context.Background())
		}
		if !errors.Is(err, ErrNotInterruptible) || RejectReason(err) != RejectNotInterruptible {
			t.Fatalf("compile (interpreter %v): %v (%s), want %v", interpret, err, RejectReason(err), ErrNotInterruptible)
		}
	}
}
