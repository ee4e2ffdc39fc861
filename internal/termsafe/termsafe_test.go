package termsafe

import (
	"encoding/json"
	"testing"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"plain kind-1 ümlaut 漢字 🙂": "plain kind-1 ümlaut 漢字 🙂",
		"\x1b[2J\x1b]0;pwned\x07":  `\x1b[2J\x1b]0;pwned\a`,
		"a\rb\nc\td":               `a\rb\nc\td`,
		"del\x7f":                  `del\x7f`,
		"c1\u009b31m":              `c1\u009b31m`,
		"bidi\u202eevil\u202c":     `bidi\u202eevil\u202c`,
		"iso\u2066x\u2069":         `iso\u2066x\u2069`,
		"bad\xff\xfeutf8":          `bad\xff\xfeutf8`,
		"real \ufffd kept":         "real \ufffd kept",
		"tag\U000e0041":            `tag\U000e0041`,
		"":                         "",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStrings(t *testing.T) {
	type row struct {
		Kind   string
		Tags   map[string]string
		Extra  map[string]any
		Errors []string
		Next   *row
		hidden string
	}
	v := &row{Kind: "k\x1b[31m", Tags: map[string]string{"t\x1b": "v\u202e"}, Extra: map[string]any{"n": 1, "s": "\x07"},
		Errors: []string{"e\r"}, Next: &row{Kind: "\x9b"}, hidden: "\x1b"}
	Strings(v)
	if v.Kind != `k\x1b[31m` || v.Tags[`t\x1b`] != `v\u202e` || len(v.Tags) != 1 || v.Extra["s"] != `\a` || v.Extra["n"] != 1 ||
		v.Errors[0] != `e\r` || v.Next.Kind != `\x9b` || v.hidden != "\x1b" {
		t.Fatalf("Strings: %+v %+v", v, v.Next)
	}
}

func TestJSON(t *testing.T) {
	in := map[string]string{"kind": "k\x1b[2J\u202e\x7f\u0085\U000e0041 ok"}
	raw, _ := json.MarshalIndent(in, "", "\t")
	safe := JSON(raw)
	if firstUnsafeJSON(safe) {
		t.Fatalf("JSON left an unsafe rune: %q", safe)
	}
	var back map[string]string
	if err := json.Unmarshal(safe, &back); err != nil || back["kind"] != in["kind"] {
		t.Fatalf("JSON changed the data: %v %q", err, back)
	}
	if got := JSON([]byte(`{"a":1}`)); string(got) != `{"a":1}` {
		t.Fatalf("clean JSON changed: %s", got)
	}
}

// firstUnsafeJSON reports an unsafe rune other than JSON's whitespace.
func firstUnsafeJSON(b []byte) bool {
	for _, r := range string(b) {
		if r != '\n' && r != '\t' && r != '\r' && unsafe(r) {
			return true
		}
	}
	return false
}
