package main

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// policyTTL reads stream_policy.retention_ttl_ms of an execution's policy
// document as encoding/json decoding it into
//
//	struct{ StreamPolicy struct{ RetentionTTLMs *json.Number `json:"retention_ttl_ms"` } `json:"stream_policy"` }
//
// would, without linking encoding/json (and reflect) into the plugin:
// the document must be valid JSON; keys match case-insensitively
// (strings.EqualFold, as encoding/json folds them) and a later duplicate
// overwrites an earlier one; the number may also be a string holding a
// valid JSON number; null leaves an object unset and sets the number to
// none; a value of the wrong kind at either level fails the whole
// document, as json.Unmarshal's error did. It returns the number's text
// and whether there is one; ok is false for any failure.
func policyTTL(doc string) (num string, ok bool) {
	p := jsonParser{s: doc}
	p.space()
	num, set, ok := p.policy()
	if !ok {
		return "", false
	}
	p.space()
	if p.i != len(p.s) {
		return "", false
	}
	return num, set
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// jsonParser walks a JSON document; i is the next byte.
type jsonParser struct {
	s     string
	i     int
	depth int
}

func (p *jsonParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// policy parses the top-level value: an object whose stream_policy
// members are read, or null; anything else valid is a type error.
// set reports whether the number is set after the last member.
func (p *jsonParser) policy() (num string, set, ok bool) {
	if p.literal("null") {
		return "", false, true
	}
	if p.peek() != '{' {
		return "", false, p.skip() && false
	}
	typeErr := false
	ok = p.object(func(key string) bool {
		if !strings.EqualFold(key, "stream_policy") {
			return p.skip()
		}
		if p.literal("null") {
			return true
		}
		if p.peek() != '{' {
			typeErr = true
			return p.skip()
		}
		return p.object(func(key string) bool {
			if !strings.EqualFold(key, "retention_ttl_ms") {
				return p.skip()
			}
			switch c := p.peek(); {
			case c == 'n':
				if !p.literal("null") {
					return false
				}
				num, set = "", false
				return true
			case c == '"':
				s, ok := p.str()
				if !ok {
					return false
				}
				if !validNumber(s) {
					typeErr = true
					return true
				}
				num, set = s, true
				return true
			case c == '-' || ('0' <= c && c <= '9'):
				start := p.i
				if !p.number() {
					return false
				}
				num, set = p.s[start:p.i], true
				return true
			default:
				typeErr = true
				return p.skip()
			}
		})
	})
	return num, set, ok && !typeErr
}

// literal consumes word when it is next.
func (p *jsonParser) literal(word string) bool {
	if strings.HasPrefix(p.s[p.i:], word) {
		p.i += len(word)
		return true
	}
	return false
}

// object parses an object at p.i, calling member with each key with p.i
// at its value; member consumes the value.
func (p *jsonParser) object(member func(key string) bool) bool {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return false
	}
	p.i++ // '{'
	p.space()
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		p.space()
		if p.peek() != '"' {
			return false
		}
		key, ok := p.str()
		if !ok {
			return false
		}
		p.space()
		if p.peek() != ':' {
			return false
		}
		p.i++
		p.space()
		if !member(key) {
			return false
		}
		p.space()
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// skip consumes any valid value.
func (p *jsonParser) skip() bool {
	switch c := p.peek(); {
	case c == '{':
		return p.object(func(string) bool { return p.skip() })
	case c == '[':
		p.depth++
		defer func() { p.depth-- }()
		if p.depth > maxDepth {
			return false
		}
		p.i++
		p.space()
		if p.peek() == ']' {
			p.i++
			return true
		}
		for {
			p.space()
			if !p.skip() {
				return false
			}
			p.space()
			switch p.peek() {
			case ',':
				p.i++
			case ']':
				p.i++
				return true
			default:
				return false
			}
		}
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	}
	return p.literal("true") || p.literal("false") || p.literal("null")
}

// number consumes a JSON number.
func (p *jsonParser) number() bool {
	n := numberLen(p.s[p.i:])
	if n == 0 {
		return false
	}
	p.i += n
	return true
}

// validNumber reports whether s is exactly one JSON number.
func validNumber(s string) bool { return s != "" && numberLen(s) == len(s) }

// numberLen returns the length of the JSON number at the start of s, or 0.
func numberLen(s string) int {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	default:
		return 0
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return 0
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return 0
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	return i
}

// str consumes a string and returns its decoded text (invalid UTF-8 and
// lone surrogates become U+FFFD, as in encoding/json).
func (p *jsonParser) str() (string, bool) {
	p.i++ // '"'
	var b []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", false
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", false
				}
				if utf16.IsSurrogate(r) {
					if r2, ok2 := p.nextHex4(); ok2 {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							p.i += 6
							b = utf8.AppendRune(b, d)
							break
						}
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", false
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			p.i++
		default:
			r, n := utf8.DecodeRuneInString(p.s[p.i:])
			b = utf8.AppendRune(b, r)
			p.i += n
		}
	}
	return "", false
}

// hex4 consumes four hex digits.
func (p *jsonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	v, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 32)
	if err != nil || strings.ContainsAny(p.s[p.i:p.i+4], "+-_") {
		return 0, false
	}
	p.i += 4
	return rune(v), true
}

// nextHex4 reads a \uXXXX escape at p.i without consuming it.
func (p *jsonParser) nextHex4() (rune, bool) {
	if !strings.HasPrefix(p.s[p.i:], `\u`) || p.i+6 > len(p.s) {
		return 0, false
	}
	q := jsonParser{s: p.s, i: p.i + 2}
	return q.hex4()
}
