package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// runCmd runs the CLI in-process and returns exit code, stdout, stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runCLI(context.Background(), &cliEnv{stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestCLI(t *testing.T) {
	t.Parallel()

	t.Run("HelpListsCommands", func(t *testing.T) {
		code, out, _ := runCmd(t, "help")
		if code != 0 || !strings.Contains(out, "lua print") || !strings.Contains(out, "version") {
			t.Fatalf("help: code %d\n%s", code, out)
		}
	})

	t.Run("LuaPrintStartsWithShebang", func(t *testing.T) {
		code, out, _ := runCmd(t, "lua", "print")
		first, _, _ := strings.Cut(out, "\n")
		if code != 0 || first != "#!lua name=flowfabric" {
			t.Fatalf("lua print: code %d, first line %q", code, first)
		}
	})

	t.Run("UnknownFlagIsOneLinePlusHint", func(t *testing.T) {
		code, out, errOut := runCmd(t, "lua", "load", "--no-such-flag")
		want := "fabric lua load: flag provided but not defined: -no-such-flag\nrun 'fabric lua load --help' for usage\n"
		if code != 2 || errOut != want || out != "" {
			t.Fatalf("code %d, stdout %q, stderr %q; want stderr %q", code, out, errOut, want)
		}
	})

	t.Run("UnknownCommandExits2", func(t *testing.T) {
		code, _, errOut := runCmd(t, "frobnicate")
		if code != 2 || !strings.Contains(errOut, "unknown command") || strings.Count(errOut, "\n") > 2 {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
	})

	t.Run("GroupWithoutSubcommandNamesThem", func(t *testing.T) {
		code, _, errOut := runCmd(t, "lua")
		if code != 2 || !strings.Contains(errOut, "load, print") {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
	})

	// Every command's --help and -h print usage exactly once, to stdout,
	// and exit 0; "fabric help CMD" is the same.
	t.Run("HelpOnEveryCommandOnce", func(t *testing.T) {
		for name := range commands {
			for _, args := range [][]string{
				append(strings.Fields(name), "--help"),
				append(strings.Fields(name), "-h"),
				append([]string{"help"}, strings.Fields(name)...),
			} {
				code, out, errOut := runCmd(t, args...)
				if code != 0 || strings.Count(out, "Usage: fabric "+name+" ") != 1 || errOut != "" {
					t.Errorf("%q: code %d, stdout %q, stderr %q", args, code, out, errOut)
				}
			}
		}
	})

	// A usage error found after parsing (errUsage) is the reason and the
	// hint, not the usage.
	t.Run("UsageErrorIsOneLinePlusHint", func(t *testing.T) {
		code, _, errOut := runCmd(t, "plugins", "inspect")
		want := "fabric plugins inspect: want one FILE\nrun 'fabric plugins inspect --help' for usage\n"
		if code != 2 || errOut != want {
			t.Fatalf("code %d, stderr %q; want %q", code, errOut, want)
		}
	})

	t.Run("StrayArgumentsAreUsageErrors", func(t *testing.T) {
		code, _, errOut := runCmd(t, "version", "extra")
		if code != 2 || !strings.Contains(errOut, "unexpected arguments") {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
	})

	t.Run("BadLogLevel", func(t *testing.T) {
		code, _, errOut := runCmd(t, "lua", "load", "--valkey-url", "unix:///nonexistent/fabric.sock", "--log-level", "loud")
		if code != 2 || !strings.Contains(errOut, "--log-level") {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
	})

	t.Run("DeadBackendIsAClearError", func(t *testing.T) {
		code, _, errOut := runCmd(t, "lua", "load", "--valkey-url", "unix:///nonexistent/fabric.sock")
		if code != 1 || !strings.Contains(errOut, "nonexistent") {
			t.Fatalf("code %d, stderr %q", code, errOut)
		}
	})
}

func TestRunDemoOnPrivateServer(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCmd(t, "run", "--plugins", "", "--duration", "1s", "--rate", "40",
		"--mix", "immediate=3,delayed=1,retry=1", "--admin-addr", "127.0.0.1:0")
	if code != 0 {
		t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"flowfabric library 34 loaded", "unfinished 0", "executions by state: completed="} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "missing=") {
		t.Errorf("an indexed execution has no core:\n%s", out)
	}
}

// TestRunWithPluginHost runs `fabric run` with the built plugin set
// (make plugins): delayed executions are promoted by the delayed_promoter
// wasm plugin, not by the workers.
func TestRunWithPluginHost(t *testing.T) {
	t.Parallel()
	// Only the promoter: the whole set under -race on two cores would test
	// the machine, not the wiring.
	dir := t.TempDir()
	copyStock(t, dir, "delayed_promoter")
	// 16 flow partitions keep each sweep short under -race.
	code, out, errOut := runCmd(t, "run", "--plugins", dir, "--duration", "1s", "--rate", "40",
		"--mix", "immediate=1,delayed=1", "--admin-addr", "127.0.0.1:0", "--partitions", "flow=16,budget=4,quota=4")
	if code != 0 {
		t.Fatalf("run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`plugin delayed_promoter \S+: .* acted (\d+), errors 0`).FindStringSubmatch(out)
	if m == nil || m[1] == "0" {
		t.Fatalf("delayed_promoter did not promote anything:\n%s", out)
	}
	if !strings.Contains(out, "unfinished 0") {
		t.Errorf("work left unfinished:\n%s", out)
	}
}
