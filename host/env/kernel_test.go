package env

import (
	"bytes"
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
	k.SetInput([]byte("input!"))
	if got := k.inputBytes(0, 6); !bytes.Equal(got, []byte("input!")) {
		t.Fatalf("input = %q", got)
	}
	k.Reset()
	if k.Length(b) != 0 || k.Memory() != 0 || k.inputLen != 0 {
		t.Fatal("Reset kept blocks or input")
	}
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "out of memory") {
			t.Fatalf("Alloc over the limit: recovered %v, want an out of memory panic", r)
		}
	}()
	k.Alloc(1 << 12)
	k.Alloc(8)
}
