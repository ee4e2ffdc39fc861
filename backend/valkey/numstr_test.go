package valkey_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/lua"
)

// numStrValues are Lua expressions the number formatters are checked on:
// clock readings and counts (the %d path) and every value that must take
// the fallback (fractions, -0, 14+ digits, non-finite).
var numStrValues = []string{
	"0", "-tonumber('0')", "1", "-1", "7", "1000", "1732712345678", "1732712345678 + 300000000",
	"99999999999999", "-99999999999999", "1e14", "-1e14", "123456789012345", "2^53", "1e300",
	"1.5", "-2.25", "0.1 + 0.2", "1732712345678.1", "1/3", "1/0", "-1/0",
}

// luaFunc returns the text of one function of a library source, from its
// header line to the first line that is exactly "end".
func luaFunc(t *testing.T, src, header string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)` + regexp.QuoteMeta(header) + `.*?\nend\n`).FindString(src)
	if m == "" {
		t.Fatalf("%q not found in the library source", header)
	}
	return m
}

// TestNumStrIsTostring runs the libraries' own number formatters (their
// text, cut from the sources) in a script on a real server: num_str and
// fab.num_str must return tostring's string for every value, and a value
// passed through num_arg_str / fab.score_arg must reach a command as the
// number argument itself does.
func TestNumStrIsTostring(t *testing.T) {
	t.Parallel()
	c := valkeytest.Client(t)
	ctx := valkeytest.Context(t, 30*time.Second)
	funcs := []string{
		luaFunc(t, lua.Source(), "local function num_str(n)"),
		luaFunc(t, lua.Source(), "local function num_arg_str(n)"),
		"local fab = {}\n" + luaFunc(t, lua.FabricSource(), "function fab.num_str(n)"),
		luaFunc(t, lua.FabricSource(), "function fab.score_arg(n)"),
	}
	var b strings.Builder
	b.WriteString(strings.Join(funcs, "\n"))
	b.WriteString("\nlocal out = {}\nlocal vals = {" + strings.Join(numStrValues, ", ") + "}\n")
	b.WriteString(`for i = 1, #vals do
  local n = vals[i]
  redis.call('SET', KEYS[1], n)
  local as_num = redis.call('GET', KEYS[1])
  redis.call('SET', KEYS[1], num_arg_str(n))
  local a = redis.call('GET', KEYS[1])
  redis.call('SET', KEYS[1], fab.score_arg(n))
  local f = redis.call('GET', KEYS[1])
  out[#out + 1] = tostring(n)
  out[#out + 1] = num_str(n)
  out[#out + 1] = fab.num_str(n)
  out[#out + 1] = as_num
  out[#out + 1] = a
  out[#out + 1] = f
end
redis.call('DEL', KEYS[1])
return out`)
	raw := c.Raw()
	got, err := raw.Do(ctx, raw.B().Eval().Script(b.String()).Numkeys(1).Key("numstr").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6*len(numStrValues) {
		t.Fatalf("got %d strings, want %d", len(got), 6*len(numStrValues))
	}
	for i, v := range numStrValues {
		r := got[6*i : 6*i+6]
		if r[1] != r[0] || r[2] != r[0] {
			t.Errorf("%s: tostring %q, num_str %q, fab.num_str %q", v, r[0], r[1], r[2])
		}
		if r[4] != r[3] || r[5] != r[3] {
			t.Errorf("%s: as a number argument %q, num_arg_str %q, fab.score_arg %q", v, r[3], r[4], r[5])
		}
	}
}
