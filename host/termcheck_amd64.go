//go:build linux && amd64

package host

import (
	"encoding/binary"
	"reflect"
	"sync"
	"syscall"
	"unsafe"

	"github.com/tetratelabs/wazero/api"
)

// A plugin's timeout needs wazero's termination checks (CloseOnContextDone):
// at every loop header the compiled code calls a trampoline that leaves
// native code, checks whether the module was closed at its deadline, and
// re-enters. A Go guest runs dozens of loop headers in an empty call, so
// those exits were half of its cost (BenchmarkScanEmpty: 15.6 cpu-µs with
// them, 7.3 without; the delayed_promoter idle scan 108 against 30).
//
// termStub thins them out: the compiled code loads the trampoline's
// address from its call engine's execution context at each loop header,
// and for the functions fabric calls that address is pointed at a stub
// that counts down and jumps to wazero's own trampoline once every
// termEvery loop headers. A call cut at its deadline (wazero closes the
// module) therefore still stops within termEvery loop iterations, and a
// long guest call still reaches Go (where the runtime can preempt it for
// a GC) as often, give or take that factor; only the cost goes.
//
// The slot is an unexported field of wazero's engine (go.mod pins wazero):
// termSlot checks its type and offset and returns nil when they differ,
// and the call then keeps wazero's checks as they are (correct, slower);
// TestTerminationStub fails on such a change.
const termEvery = 1000

// termStubSize is the code page and the data page after it: data holds
// the countdown (offset 0) and the address of wazero's trampoline (8).
const termStubSize = 2 << 12

// termStub is one runtime's countdown stub (wazero's trampoline is per
// runtime). Safe for concurrent use: the countdown is shared by the
// instances running at once, which only changes how often they check.
type termStub struct {
	mu   sync.Mutex
	mem  []byte  // code page, data page
	real uintptr // wazero's trampoline, once the first function was seen
	bad  bool    // a function's trampoline differed: patch no more
}

// stubCode is the stub, position-independent; the data page follows the
// code page at +4096:
//
//	sub  qword [rip+counter], 1
//	jle  slow
//	ret
//	slow: mov qword [rip+counter], termEvery
//	jmp  qword [rip+real]
func stubCode() []byte {
	rel := func(target, next int) []byte {
		return binary.LittleEndian.AppendUint32(nil, uint32(int32(target-next)))
	}
	const data = 4096
	c := []byte{0x48, 0x83, 0x2d}
	c = append(c, rel(data, 8)...)
	c = append(c, 0x01)             // 0..7   sub qword [rip+d32], 1
	c = append(c, 0x7e, 0x01)       // 8..9   jle +1
	c = append(c, 0xc3)             // 10     ret
	c = append(c, 0x48, 0xc7, 0x05) // 11..21 mov qword [rip+d32], imm32
	c = append(c, rel(data, 22)...)
	c = binary.LittleEndian.AppendUint32(c, termEvery)
	c = append(c, 0xff, 0x25) // 22..27 jmp qword [rip+d32]
	c = append(c, rel(data+8, 28)...)
	return c
}

// newTermStub maps a stub; nil when the mapping fails (calls keep
// wazero's checks).
func newTermStub() *termStub {
	mem, err := syscall.Mmap(-1, 0, termStubSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil
	}
	copy(mem, stubCode())
	binary.LittleEndian.PutUint64(mem[4096:], termEvery)
	if err := syscall.Mprotect(mem[:4096], syscall.PROT_READ|syscall.PROT_EXEC); err != nil {
		_ = syscall.Munmap(mem)
		return nil
	}
	return &termStub{mem: mem}
}

// patch points f's termination check at the stub; false when it cannot
// (f keeps wazero's checks).
func (s *termStub) patch(f api.Function) bool {
	if s == nil {
		return false
	}
	slot := termSlot(f)
	if slot == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem == nil || s.bad {
		return false
	}
	cur := uintptr(*slot)
	code := uintptr(unsafe.Pointer(&s.mem[0]))
	switch {
	case cur == code:
		return true
	case s.real == 0:
		s.real = cur
		binary.LittleEndian.PutUint64(s.mem[4096+8:], uint64(cur))
	case s.real != cur:
		s.bad = true
		return false
	}
	*slot = unsafe.Pointer(&s.mem[0])
	return true
}

// close unmaps the stub; no function pointed at it may run again (the
// module's runtime is closed first).
func (s *termStub) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem != nil {
		_ = syscall.Munmap(s.mem)
		s.mem = nil
	}
}

// termSlot returns the address of f's trampoline slot, or nil when f is
// not a wazevo call engine of the expected layout.
func termSlot(f api.Function) *unsafe.Pointer {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	ce := v.Elem()
	if ce.Type().String() != "wazevo.callEngine" {
		return nil
	}
	ec := ce.FieldByName("execCtx")
	if !ec.IsValid() || ec.Kind() != reflect.Struct {
		return nil
	}
	sf, ok := ec.Type().FieldByName("checkModuleExitCodeTrampolineAddress")
	if !ok || sf.Offset != 88 || sf.Type != reflect.TypeFor[*byte]() {
		return nil
	}
	return (*unsafe.Pointer)(unsafe.Pointer(ec.Field(sf.Index[0]).UnsafeAddr()))
}
