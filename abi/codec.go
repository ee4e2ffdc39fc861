package abi

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"unsafe"

	"github.com/fabric-host/fabric/internal/errtext"
)

// ErrDecode is matched by every decoding failure.
var ErrDecode = errors.New("abi: malformed message")

// ErrDecodeLimit is matched by a decoding (DecodeWithin) stopped because
// the decoded form would take more memory than its limit. The message may
// be well formed: it is too large for the memory left to it.
var ErrDecodeLimit = errors.New("abi: decoded message over its memory limit")

// Encoder appends the ABI's primitive encodings to a buffer: unsigned and
// zig-zag varints, length-prefixed strings and lists. The zero value is
// ready to use.
//
// # Notes
//
//   - Not safe for concurrent use.
type Encoder struct{ buf []byte }

// NewEncoder returns an encoder appending to buf (which may be nil).
func NewEncoder(buf []byte) *Encoder { return &Encoder{buf: buf} }

// Bytes returns the encoded bytes.
func (e *Encoder) Bytes() []byte { return e.buf }

// Reset empties the buffer, keeping its capacity.
func (e *Encoder) Reset() { e.buf = e.buf[:0] }

// Byte appends one byte.
func (e *Encoder) Byte(b byte) { e.buf = append(e.buf, b) }

// Uvarint appends an unsigned varint.
func (e *Encoder) Uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }

// Varint appends a zig-zag varint.
func (e *Encoder) Varint(v int64) { e.buf = binary.AppendVarint(e.buf, v) }

// Bool appends 0 or 1.
func (e *Encoder) Bool(v bool) {
	if v {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
}

// Float64 appends the IEEE-754 bits, little endian.
func (e *Encoder) Float64(v float64) {
	e.buf = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(v))
}

// String appends a length-prefixed string.
func (e *Encoder) String(s string) {
	e.Uvarint(uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// Strings appends a count then each string.
func (e *Encoder) Strings(ss []string) {
	e.Uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.String(s)
	}
}

// Decoder reads what an Encoder wrote. The first failure is sticky: later
// reads return zero values and Err reports the failure, so a message
// decoder checks Err once at the end.
//
// # Notes
//
//   - Counts are bounded by the bytes left, so garbage never makes the
//     decoder allocate more than the message's size.
//   - Not safe for concurrent use.
type Decoder struct {
	buf []byte
	off int
	err error
	// limit, when positive, bounds used: the bytes of Go memory the
	// decoded form takes (list elements, string bytes).
	limit, used int
}

// Request is a message the host decodes within a memory limit
// (DecodeWithin): every host-call request.
type Request interface {
	decodeFrom(d *Decoder) error
}

// DecodeWithin decodes b into r, as r.UnmarshalBinary does, allocating at
// most about limit bytes for its decoded form (limit <= 0: no limit).
// used is what that form takes: its lists' elements and its strings'
// bytes. A form over the limit fails with ErrDecodeLimit before its
// elements are allocated.
func DecodeWithin(r Request, b []byte, limit int) (used int, err error) {
	d := &Decoder{buf: b, limit: limit}
	err = r.decodeFrom(d)
	return d.used, err
}

// charge counts n bytes of decoded form against the limit.
func (d *Decoder) charge(n int) bool {
	d.used += n
	if d.limit > 0 && d.used > d.limit && d.err == nil {
		d.err = errtext.Wrap(ErrDecodeLimit, ErrDecodeLimit.Error()+": "+errtext.D(d.used)+" bytes, above "+errtext.D(d.limit))
	}
	return d.err == nil
}

// NewDecoder returns a decoder over b.
func NewDecoder(b []byte) *Decoder { return &Decoder{buf: b} }

// Err returns the first decoding failure.
func (d *Decoder) Err() error { return d.err }

// Remaining returns the number of unread bytes.
func (d *Decoder) Remaining() int { return len(d.buf) - d.off }

// Finish fails unless every byte was consumed and no read failed.
func (d *Decoder) Finish(what string) error {
	if d.err != nil {
		return errtext.Wrap(d.err, what+": "+d.err.Error())
	}
	if d.off != len(d.buf) {
		return errtext.Wrap(ErrDecode, what+": "+ErrDecode.Error()+": "+errtext.D(len(d.buf)-d.off)+" trailing bytes")
	}
	return nil
}

func (d *Decoder) fail(text string) {
	if d.err == nil {
		d.err = errtext.Wrap(ErrDecode, ErrDecode.Error()+": "+text)
	}
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.buf) {
		d.fail("unexpected end at byte " + errtext.D(d.off))
		return 0
	}
	b := d.buf[d.off]
	d.off++
	return b
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf[d.off:])
	if n <= 0 {
		d.fail("bad uvarint at byte " + errtext.D(d.off))
		return 0
	}
	d.off += n
	return v
}

// Varint reads a zig-zag varint.
func (d *Decoder) Varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf[d.off:])
	if n <= 0 {
		d.fail("bad varint at byte " + errtext.D(d.off))
		return 0
	}
	d.off += n
	return v
}

// Uint32 reads a uvarint that must fit 32 bits.
func (d *Decoder) Uint32() uint32 {
	v := d.Uvarint()
	if v > math.MaxUint32 {
		d.fail("value " + errtext.U(v) + " overflows uint32")
		return 0
	}
	return uint32(v)
}

// Bool reads 0 or 1.
func (d *Decoder) Bool() bool {
	switch b := d.Byte(); b {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("bad bool " + errtext.U(b))
		return false
	}
}

// Float64 reads 8 little-endian bytes.
func (d *Decoder) Float64() float64 {
	if d.err != nil {
		return 0
	}
	if len(d.buf)-d.off < 8 {
		d.fail("unexpected end at byte " + errtext.D(d.off))
		return 0
	}
	v := binary.LittleEndian.Uint64(d.buf[d.off:])
	d.off += 8
	return math.Float64frombits(v)
}

// Count reads a list length, refusing one that cannot fit in what is left
// (every element takes at least one byte).
func (d *Decoder) Count() int { return d.CountOf(1) }

// CountOf reads the length of a list whose elements take at least
// minBytes encoded bytes each, refusing one above the bytes left divided
// by minBytes: a count that lies about the bytes present fails here,
// before anything is allocated for it.
func (d *Decoder) CountOf(minBytes int) int {
	n := d.Uvarint()
	if d.err == nil && n > uint64(d.Remaining()/max(minBytes, 1)) {
		d.fail("count " + errtext.U(n) + " of elements of at least " + errtext.D(minBytes) + " bytes exceeds the " + errtext.D(d.Remaining()) + " bytes left")
		return 0
	}
	return int(n)
}

// String reads a length-prefixed string.
func (d *Decoder) String() string {
	n := d.Uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(d.Remaining()) {
		d.fail("string of " + errtext.U(n) + " bytes exceeds " + errtext.D(d.Remaining()) + " remaining")
		return ""
	}
	if !d.charge(int(n)) {
		return ""
	}
	s := string(d.buf[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

// Strings reads a count then each string (nil for none).
func (d *Decoder) Strings() []string {
	out := decodeList(d, 1, (*Decoder).String)
	if len(out) == 0 {
		return nil
	}
	return out
}

// maxPrealloc bounds the bytes a list reserves ahead of the elements it
// has decoded. A list grows as its elements decode, so what it costs is
// proportional to the elements present, whatever its count claims.
const maxPrealloc = 64 << 10

// decodeList reads a count of elements of at least minBytes encoded
// bytes each (CountOf), then each element with elem. The result is
// non-nil, and nil once decoding failed.
func decodeList[T any](d *Decoder, minBytes int, elem func(*Decoder) T) []T {
	n := d.CountOf(minBytes)
	if d.err != nil {
		return nil
	}
	var zero T
	size := max(int(unsafe.Sizeof(zero)), 1)
	c := min(n, maxPrealloc/size)
	if !d.charge(c * size) {
		return nil
	}
	out := make([]T, 0, c)
	for range n {
		v := elem(d)
		if d.err != nil {
			return nil
		}
		if len(out) == cap(out) {
			more := min(max(cap(out), 8), n-len(out))
			if !d.charge(more * size) {
				return nil
			}
			out = slices.Grow(out, more)
		}
		out = append(out, v)
	}
	return out
}
