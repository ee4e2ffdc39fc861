// Package errtext builds the error values of fabric's guest-side packages
// (abi, model, pdk) without fmt: a plugin module links what its pdk uses,
// and fmt brings reflect, its own printer and the float formatting with it
// (about a tenth of a stock plugin). The texts are the ones fmt.Errorf
// produced; errors.Is and errors.As see the wrapped errors as they did.
package errtext

import "strconv"

// Wrap returns an error whose text is text and that wraps err, as
// fmt.Errorf with one %w verb does.
func Wrap(err error, text string) error { return &wrapError{text, err} }

// Wrap2 returns an error whose text is text and that wraps a and b, as
// fmt.Errorf with two %w verbs does.
func Wrap2(a, b error, text string) error { return &wrapErrors{text, []error{a, b}} }

type wrapError struct {
	text string
	err  error
}

func (e *wrapError) Error() string { return e.text }
func (e *wrapError) Unwrap() error { return e.err }

type wrapErrors struct {
	text string
	errs []error
}

func (e *wrapErrors) Error() string   { return e.text }
func (e *wrapErrors) Unwrap() []error { return e.errs }

// Q is fmt's %q of a string.
func Q(s string) string { return strconv.Quote(s) }

// D is fmt's %d of an integer.
func D[T ~int | ~int8 | ~int16 | ~int32 | ~int64](v T) string { return strconv.FormatInt(int64(v), 10) }

// U is fmt's %d of an unsigned integer.
func U[T ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr](v T) string {
	return strconv.FormatUint(uint64(v), 10)
}

// Hex2 is fmt's %02x of a byte.
func Hex2(b byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}
