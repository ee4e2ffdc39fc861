package host

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// dataGapMax is the widest run of zeros between two data segments that
// compactData fills in to merge them: below it, a segment's bookkeeping
// (~100 bytes of Go heap a segment, and 24 bytes an instance) costs more
// than the zeros.
const dataGapMax = 256

// compactData merges a module's active data segments into a few. Go's
// wasm linker splits its data wherever 16 or more zero bytes run
// (35 936 segments of 25 bytes on average for a stock scanner), and wazero
// keeps every segment as a Go struct with its own allocation for the
// module's life, plus a slice entry per instance: ~4 MiB of Go heap a
// plugin. The merged module writes the same bytes at instantiation: the
// segments are sorted by offset and merged only when they are disjoint,
// the gaps filled with the zeros a fresh memory holds.
//
// It returns b itself when the module is not that simple: a data count
// section (memory.init and data.drop name segments by index), a passive
// segment or one of another memory, an offset that is not a constant, or
// overlapping segments.
func compactData(b []byte) []byte {
	if len(b) < 8 || !bytes.Equal(b[:4], []byte("\x00asm")) {
		return b
	}
	var dataStart, dataEnd, bodyStart int
	for i := 8; i < len(b); {
		id := b[i]
		size, n := binary.Uvarint(b[i+1:])
		if n <= 0 || size > uint64(len(b)-i-1-n) {
			return b
		}
		body := i + 1 + n
		switch id {
		case 12: // data count
			return b
		case 11:
			dataStart, bodyStart, dataEnd = i, body, body+int(size)
		}
		i = body + int(size)
	}
	if dataEnd == 0 {
		return b
	}
	type seg struct {
		off  uint32
		data []byte
	}
	d := b[bodyStart:dataEnd]
	// A segment takes at least 4 bytes (flags, i32.const, end, size): a
	// count the section cannot hold is refused before anything is made,
	// and the list grows as segments decode.
	count, n := binary.Uvarint(d)
	if n <= 0 || count > uint64(len(d)-n)/4 {
		return b
	}
	d = d[n:]
	segs := make([]seg, 0, min(count, 1024))
	for range count {
		// flags 0 (active, memory 0), i32.const off, end, size, bytes
		if len(d) < 3 || d[0] != 0 || d[1] != 0x41 {
			return b
		}
		off, n := readSleb32(d[2:])
		if n <= 0 || off < 0 || 2+n >= len(d) || d[2+n] != 0x0b {
			return b
		}
		d = d[3+n:]
		size, n := binary.Uvarint(d)
		if n <= 0 || size > uint64(len(d)-n) {
			return b
		}
		segs = append(segs, seg{off: uint32(off), data: d[n : n+int(size)]})
		d = d[n+int(size):]
	}
	if len(d) != 0 || len(segs) < 2 {
		return b
	}
	slices.SortStableFunc(segs, func(x, y seg) int { return int(int64(x.off) - int64(y.off)) })
	for i := 1; i < len(segs); i++ {
		if uint64(segs[i].off) < uint64(segs[i-1].off)+uint64(len(segs[i-1].data)) {
			return b // overlapping: application order matters
		}
	}
	var merged []seg
	var cur []byte
	var curOff uint32
	for i, s := range segs {
		if i > 0 && uint64(s.off)-(uint64(curOff)+uint64(len(cur))) <= dataGapMax {
			cur = append(cur, make([]byte, int(s.off-curOff)-len(cur))...)
			cur = append(cur, s.data...)
			continue
		}
		if i > 0 {
			merged = append(merged, seg{off: curOff, data: cur})
		}
		curOff, cur = s.off, append([]byte(nil), s.data...)
	}
	merged = append(merged, seg{off: curOff, data: cur})
	if len(merged) == len(segs) {
		return b
	}
	var sec []byte
	sec = binary.AppendUvarint(sec, uint64(len(merged)))
	for _, s := range merged {
		sec = append(sec, 0, 0x41)
		sec = appendSleb(sec, int64(int32(s.off)))
		sec = append(sec, 0x0b)
		sec = binary.AppendUvarint(sec, uint64(len(s.data)))
		sec = append(sec, s.data...)
	}
	out := make([]byte, 0, len(b)-(dataEnd-dataStart)+len(sec)+6)
	out = append(out, b[:dataStart]...)
	out = append(out, 11)
	out = binary.AppendUvarint(out, uint64(len(sec)))
	out = append(out, sec...)
	return append(out, b[dataEnd:]...)
}

// readSleb32 decodes a signed LEB128 of at most 5 bytes (an i32).
func readSleb32(b []byte) (int32, int) {
	var v int64
	var shift uint
	for i := 0; i < len(b) && i < 5; i++ {
		c := b[i]
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			if v < -1<<31 || v > 1<<31-1 {
				return 0, -1
			}
			return int32(v), i + 1
		}
	}
	return 0, -1
}

// appendSleb appends v as a signed LEB128.
func appendSleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
