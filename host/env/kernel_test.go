package env

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestKernelBlocks: blocks are where Alloc says, Length names only live
// blocks, a freed block's room is reused, Reset forgets everything, and
// an allocation over the limit panics (a trap of the guest call) saying
// out of memory.
func TestKernelBlocks(t *testing.T) {
	k := NewKernel(1 << 12)
	if off := k.Alloc(0); off != 0 {
		t.Fatalf("Alloc(0) = %d, want 0", off)
	}
	a := k.Write([]byte("hello"))
	b := k.Write([]byte("a longer block of bytes"))
	if a == 0 || b == 0 || a == b || a%8 != 0 || b%8 != 0 {
		t.Fatalf("offsets %d, %d: want distinct, non-zero, 8-aligned", a, b)
	}
	if got, ok := k.Block(a); !ok || string(got) != "hello" {
		t.Fatalf("Block(a) = %q, %v", got, ok)
	}
	if n := k.Length(b); n != 23 {
		t.Fatalf("Length(b) = %d, want 23", n)
	}
	if n := k.Length(a + 1); n != 0 {
		t.Fatalf("Length inside a block = %d, want 0", n)
	}
	if _, ok := k.Bytes(b, 24); !ok {
		t.Fatal("a block's padding is kernel memory")
	}
	if _, ok := k.Bytes(b, 25); ok {
		t.Fatal("Bytes past the last block is not kernel memory")
	}
	k.Free(a)
	if n := k.Length(a); n != 0 {
		t.Fatalf("Length of a freed block = %d", n)
	}
	if c := k.Write([]byte("reuse")); c != a {
		t.Fatalf("a freed block's room is not reused: %d, want %d", c, a)
	}
	if err := k.SetInput([]byte("input!")); err != nil {
		t.Fatal(err)
	}
	if got := k.inputBytes(0, 6); !bytes.Equal(got, []byte("input!")) {
		t.Fatalf("input = %q", got)
	}
	k.Reset()
	if k.Length(b) != 0 || k.Memory() != 0 || k.inputLen != 0 {
		t.Fatal("Reset kept blocks or input")
	}
	defer func() {
		r := recover()
		if err, _ := r.(error); !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "out of memory") {
			t.Fatalf("Alloc over the limit: recovered %v, want an out of memory panic", r)
		}
	}()
	k.Alloc(1 << 12)
	k.Alloc(8)
}

// TestKernelSharesTheCap: the kernel's blocks, what host functions hold
// and the plugin's linear memory share one cap. With 40 of 64 KiB in
// linear memory a 32 KiB block fails (a 16 KiB one fits), a hold past the
// rest fails, and an input that does not fit is an error, not a panic.
// On main the kernel had the whole cap to itself.
func TestKernelSharesTheCap(t *testing.T) {
	const limit = 64 << 10
	linear := uint64(40 << 10)
	k := NewKernel(limit)
	k.Linear = func() uint64 { return linear }
	if _, err := k.TryAlloc(32 << 10); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("a 32 KiB block beside 40 KiB of linear memory under a 64 KiB cap: err %v, want ErrOutOfMemory", err)
	}
	off, err := k.TryAlloc(16 << 10)
	if err != nil || off == 0 {
		t.Fatalf("a 16 KiB block: %d, %v", off, err)
	}
	if got := k.Charged() + linear; got > limit {
		t.Fatalf("charged %d + linear %d = %d, above the %d cap", k.Charged(), linear, got, limit)
	}
	if err := k.Hold(k.Room() + 1); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("a hold past the room: err %v, want ErrOutOfMemory", err)
	}
	if err := k.Hold(k.Room()); err != nil {
		t.Fatalf("a hold of the room: %v", err)
	}
	if k.Room() != 0 {
		t.Fatalf("room after holding it all = %d", k.Room())
	}
	k = NewKernel(limit)
	k.Linear = func() uint64 { return limit - 4<<10 }
	if err := k.SetInput(make([]byte, 8<<10)); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("an 8 KiB input with 4 KiB left: err %v, want ErrOutOfMemory", err)
	}
}
