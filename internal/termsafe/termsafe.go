// Package termsafe makes text fabric did not write itself safe to print
// on an operator's terminal: an execution's kind or error, a tag, a lane
// name, a payload preview, a plugin's name or reason. Such text comes
// from workers, plugins and backends, and a control character in it —
// an escape sequence, a carriage return, a bidi override — would
// otherwise act on the terminal instead of being shown.
//
// String escapes those characters visibly (ESC reads \x1b, U+202E reads
// \u202e); Strings escapes every string reachable from a value; JSON
// escapes them inside JSON text as \u escapes, which decode to the same
// value.
package termsafe

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// unsafe reports whether r must not reach a terminal as it is: the C0
// controls, DEL and the C1 controls (Cc), format characters such as the
// bidi embeddings, overrides and isolates U+202A–U+202E and
// U+2066–U+2069 (Cf), the line and paragraph separators, private-use and
// unassigned code points. Letters, marks, numbers, punctuation, symbols
// and spaces are kept.
func unsafe(r rune) bool { return !unicode.IsGraphic(r) }

// String returns s with every unsafe rune escaped (\t, \n, \r, \x1b,
// \u202e, \U000e0001) and every byte that is not UTF-8 as \xNN. Text
// without one is returned as it is.
func String(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case unsafe(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e', '\t'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Lines is String of each line of s, the newlines between them kept: for
// text of several lines, such as a joined error.
func Lines(s string) string {
	if firstUnsafe(s) < 0 {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = String(l)
	}
	return strings.Join(lines, "\n")
}

// firstUnsafe is the index of s's first unsafe rune or invalid byte, or -1.
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafe(r) {
			return i
		}
		i += n
	}
	return -1
}

// Strings escapes, in place, every string reachable from v (a pointer):
// struct fields, slice and array elements, map keys and values, through
// pointers and interfaces. Unexported fields are left alone. Call it on
// an answer decoded from an API or read from a backend before printing
// any of it. v must hold no cycle of pointers (an answer decoded from
// JSON never does).
func Strings(v any) {
	walk(reflect.ValueOf(v))
}

func walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Interface {
			// What an interface holds cannot be set in place: escape a
			// copy and put it back.
			if !v.CanSet() {
				return
			}
			c := reflect.New(v.Elem().Type()).Elem()
			c.Set(v.Elem())
			walk(c)
			v.Set(c)
			return
		}
		walk(v.Elem())
	case reflect.String:
		if v.CanSet() {
			v.SetString(String(v.String()))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				walk(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walk(v.Index(i))
		}
	case reflect.Map:
		walkMap(v)
	}
}

// walkMap escapes a map's keys and values: each entry is escaped in a
// copy, then stored back (under its escaped key).
func walkMap(v reflect.Value) {
	if v.IsNil() {
		return
	}
	keys := v.MapKeys()
	for _, k := range keys {
		nk := reflect.New(k.Type()).Elem()
		nk.Set(k)
		walk(nk)
		nv := reflect.New(v.Type().Elem()).Elem()
		nv.Set(v.MapIndex(k))
		walk(nv)
		if !nk.Equal(k) {
			v.SetMapIndex(k, reflect.Value{})
		}
		v.SetMapIndex(nk, nv)
	}
}

// JSON returns JSON text with every unsafe rune inside it written as a
// \u escape, which a JSON decoder reads back as the same rune: the
// --json answers stay the same data and safe to print. The JSON
// whitespace outside strings (tab, newline, carriage return) is kept; a
// byte that is not UTF-8 becomes \ufffd, as encoding/json itself would
// read it.
func JSON(b []byte) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		bad := r == utf8.RuneError && n == 1
		if !bad && (!unsafe(r) || r == '\t' || r == '\n' || r == '\r') {
			i += n
			continue
		}
		if bad {
			r = utf8.RuneError
		}
		out = append(out, b[last:i]...)
		if r > 0xffff {
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
		last = i
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}
