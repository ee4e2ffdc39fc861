package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"runtime"
	"testing"

	"github.com/fabric-host/fabric/abi"
)

// dataSegments counts a module's data segments (-1: no data section).
func dataSegments(t *testing.T, b []byte) int {
	t.Helper()
	for i := 8; i < len(b); {
		id := b[i]
		size, n := uvarint(b[i+1:])
		body := i + 1 + n
		if id == 11 {
			c, _ := uvarint(b[body:])
			return int(c)
		}
		i = body + int(size)
	}
	return -1
}

func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i, c := range b {
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// TestCompactData: a Go plugin's tens of thousands of data segments
// become a few, and an instance of the compacted module starts with the
// same linear memory, byte for byte, as one of the file; it then runs.
// A module compactData cannot prove equal (overlapping segments) is
// returned as it is.
func TestCompactData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := os.ReadFile(benchFixture(t, "healthy"))
	if err != nil {
		t.Fatal(err)
	}
	c := compactData(b)
	before, after := dataSegments(t, b), dataSegments(t, c)
	if before < 1000 || after < 1 || after > 100 {
		t.Fatalf("data segments %d -> %d, want thousands -> a few", before, after)
	}
	lc := benchLoader(t, benchCache(t))
	memOf := func(wasm []byte) []byte {
		m, err := compileModule(ctx, wasm, "", abi.DefaultMaxPages, lc)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close(ctx)
		inst, err := m.newInstance(ctx) // no start function has run
		if err != nil {
			t.Fatal(err)
		}
		defer inst.close(ctx)
		mem, ok := inst.mod.Memory().Read(0, inst.mod.Memory().Size())
		if !ok {
			t.Fatal("read memory")
		}
		return bytes.Clone(mem)
	}
	if x, y := memOf(b), memOf(c); !bytes.Equal(x, y) {
		t.Fatalf("initial memories differ (%d and %d bytes)", len(x), len(y))
	}
	m, err := compileModule(ctx, c, "", abi.DefaultMaxPages, lc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	inst, err := m.newInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.close(ctx)
	out, err := m.callInstance(ctx, inst, abi.ExportManifest, nil, m.fns(m, ""))
	var man abi.Manifest
	if err != nil || man.UnmarshalBinary(out) != nil || man.Name == "" {
		t.Fatalf("manifest from the compacted module: %+v, %v", man, err)
	}

	// Two segments writing the same byte: left as they are.
	overlap := []byte("\x00asm\x01\x00\x00\x00" +
		"\x05\x03\x01\x00\x01" + // memory section: one memory, min 1 page
		"\x0b\x0f\x02" + // data section, 2 segments
		"\x00\x41\x00\x0b\x02ab" +
		"\x00\x41\x01\x0b\x02cd")
	if got := compactData(overlap); !bytes.Equal(got, overlap) {
		t.Fatalf("overlapping segments were rewritten: %x", got)
	}
}

// TestCompactDataCountLie: a data section whose segment count its bytes
// cannot hold (4 Mi segments in 4 MiB: a segment takes at least 4 bytes)
// is left as it is without making room for the count first (it made 128
// MiB of segment headers before it found the lie).
func TestCompactDataCountLie(t *testing.T) {
	const count = 4 << 20
	body := binary.AppendUvarint(nil, count)
	body = append(body, make([]byte, count)...)
	mod := append([]byte("\x00asm\x01\x00\x00\x00"), 11)
	mod = binary.AppendUvarint(mod, uint64(len(body)))
	mod = append(mod, body...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out := compactData(mod)
	runtime.ReadMemStats(&after)
	if !bytes.Equal(out, mod) {
		t.Fatal("compactData changed a module with a lying data section")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("compactData allocated %d bytes for a count of %d its 4 MiB cannot hold", got, count)
	}
}
