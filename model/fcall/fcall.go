// Package fcall is FlowFabric's function calls as fabric sends them: per
// ff_* function, its parameter struct, its layout (the function name, KEYS
// and ARGV, built by the struct's Call method from model's key builders)
// and, where a caller reads the reply, its decoder over Reply.
//
// The host side (backend/valkey) and the wasip1 plugins (through pdk)
// build their calls here, so a layout is written once and both send the
// same bytes. Like model it depends only on light parts of the standard
// library (no fmt, encoding or crypto): every plugin links it.
//
// A layout sends what its struct holds: values a caller pre-reads from
// exec_core (lane, attempt index, waitpoint id...) are fields, and the
// caller decides their defaults, so a call with bad input reaches the
// library as it was read and writes nothing there.
package fcall

import (
	"errors"
	"strconv"
)

// Call is one FCALL: the function and its KEYS and ARGV.
type Call struct {
	// Function is the library function, e.g. "ff_promote_delayed".
	Function string
	// Keys and Args are KEYS and ARGV.
	Keys []string
	Args []string
}

// Reply is a successful ff_* reply {1, Status, Fields...}: what the Valkey
// driver decodes and what a plugin's abi.CallResult holds for StatusOK.
// Status is "OK" or one of the alternative success statuses
// (StatusAlreadySatisfied, "DUPLICATE", "ALREADY_APPLIED", ...).
type Reply struct {
	Status string
	Fields []string
}

// StatusAlreadySatisfied is the success status of a call that found its
// work already done and changed nothing.
const StatusAlreadySatisfied = "ALREADY_SATISFIED"

// Field returns field i, or "" when the reply is shorter.
func (r *Reply) Field(i int) string {
	if r == nil || i < 0 || i >= len(r.Fields) {
		return ""
	}
	return r.Fields[i]
}

// ErrNotANumber is matched (errors.Is) by the error of Reply.Int on a
// field that is not a number.
var ErrNotANumber = errors.New("reply field is not a number")

// fieldError is Reply.Int's error: which field held what.
type fieldError struct {
	index int
	value string
}

func (e *fieldError) Error() string {
	return "fcall: reply field " + strconv.Itoa(e.index) + " " + strconv.Quote(e.value) + " is not a number"
}

func (e *fieldError) Unwrap() error { return ErrNotANumber }

// Int returns field i parsed as an integer. Some Lua numbers arrive as
// floats ("12.0"); they are truncated.
func (r *Reply) Int(i int) (int64, error) {
	s := r.Field(i)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return 0, &fieldError{index: i, value: s}
		}
		return int64(f), nil
	}
	return n, nil
}

// itoa renders n in decimal.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// msOrEmpty renders a millisecond time, "" for 0 (the library's "none").
func msOrEmpty(ms int64) string {
	if ms == 0 {
		return ""
	}
	return itoa(ms)
}

// jsonOrEmptyObject is doc, or "{}" when it is empty.
func jsonOrEmptyObject(doc string) string {
	if doc == "" {
		return "{}"
	}
	return doc
}

// laneOrDefault is lane, or "default" when it is empty.
func laneOrDefault(lane string) string {
	if lane == "" {
		return "default"
	}
	return lane
}
