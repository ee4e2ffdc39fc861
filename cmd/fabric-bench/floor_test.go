package main

import (
	"slices"
	"strings"
	"testing"
)

// MONITOR's quoted arguments decode back to the bytes sent, escapes
// included.
func TestParseMonitorArgs(t *testing.T) {
	got := parseMonitorArgs(`"HSET" "ff:exec:{fp:1}:x:core" "a\"b" "c\\d" "\x00\xff" "l\nm" ""`)
	want := []string{"HSET", "ff:exec:{fp:1}:x:core", `a"b`, `c\d`, "\x00\xff", "l\nm", ""}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// The floor script quotes literals so Lua reads the same bytes, and sends
// every argument that carries an id as ARGV, filled per execution.
func TestFloorScript(t *testing.T) {
	cmds := []floorCmd{
		{"HSET", "ff:exec:{fp:1}:" + phEID + ":core", "k'\\", "v\x01é"},
		{"XADD", "h", "*", "lease_id", phLease, "attempt_id", phAttempt},
	}
	script, argv := floorScript(cmds)
	wantScript := `redis.call('HSET', ARGV[1], 'k\'\\', 'v\001\195\169')` + "\n" +
		`redis.call('XADD', 'h', '*', 'lease_id', ARGV[2], 'attempt_id', ARGV[3])` + "\nreturn 1\n"
	if script != wantScript {
		t.Fatalf("script:\n%s\nwant:\n%s", script, wantScript)
	}
	got := argv(floorIDs{eid: "{fp:1}:e", lease: "L", attempt: "A"})
	if want := []string{"ff:exec:{fp:1}:{fp:1}:e:core", "L", "A"}; !slices.Equal(got, want) {
		t.Fatalf("argv %q, want %q", got, want)
	}
	if strings.Contains(script, "\x00") {
		t.Fatal("a placeholder leaked into the script")
	}
}
