package errtext

import (
	"errors"
	"fmt"
	"testing"
)

var (
	errA = errors.New("a")
	errB = errors.New("b")
)

// TestSameAsFmt checks each helper against the fmt verb it stands for.
func TestSameAsFmt(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Q("x\"y\n\x00é"), fmt.Sprintf("%q", "x\"y\n\x00é")},
		{D(-42), fmt.Sprintf("%d", -42)},
		{D(int16(7)), fmt.Sprintf("%d", int16(7))},
		{U(uint64(1) << 63), fmt.Sprintf("%d", uint64(1)<<63)},
		{U(uint8(255)), fmt.Sprintf("%d", uint8(255))},
		{Hex2(0x0a), fmt.Sprintf("%02x", 0x0a)},
		{Hex2(0xff), fmt.Sprintf("%02x", 0xff)},
		{Wrap(errA, "w: a").Error(), fmt.Errorf("w: %w", errA).Error()},
		{Wrap2(errA, errB, "a: b").Error(), fmt.Errorf("%w: %w", errA, errB).Error()},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestWrapsAsFmt checks that errors.Is and errors.Unwrap see through the
// errors as through fmt.Errorf's.
func TestWrapsAsFmt(t *testing.T) {
	w := Wrap(errA, "x: a")
	if !errors.Is(w, errA) || errors.Unwrap(w) != errA {
		t.Errorf("Wrap: errors.Is/Unwrap do not reach the wrapped error")
	}
	w2 := Wrap2(errA, errB, "a: b")
	if !errors.Is(w2, errA) || !errors.Is(w2, errB) {
		t.Errorf("Wrap2: errors.Is does not reach both errors")
	}
	if errors.Is(Wrap(errA, "a"), errB) {
		t.Errorf("Wrap: errors.Is matches an error it does not wrap")
	}
}
