package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// run runs the CLI in-process and returns its exit code and streams.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runCLI(context.Background(), &cliEnv{stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

// fixture returns a built test plugin, failing clearly when it is missing.
func fixture(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "testdata", "plugins", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("fixture %s.wasm is missing: run `make plugins` first", name)
	}
	return p
}

func TestPluginsCommands(t *testing.T) {
	t.Parallel()
	cache := defaultCacheDir() // shared with the CLI: each fixture compiles once per machine

	t.Run("ValidateAcceptsGoodPlugin", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := run(t, "plugins", "validate", "--cache-dir", cache, filepath.Join("..", "..", "bin", "plugins", "delayed_promoter.wasm"))
		if code != 0 || !strings.Contains(out, "ok: delayed_promoter ") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("ValidateRefusesWithReason", func(t *testing.T) {
		t.Parallel()
		for fx, reason := range map[string]string{
			"abimismatch": "version mismatch",
			"truncated":   "truncated or corrupt",
			"noexport":    "lacks a required export",
		} {
			code, _, errOut := run(t, "plugins", "validate", "--cache-dir", cache, fixture(t, fx))
			if code != 1 || !strings.Contains(errOut, reason) {
				t.Fatalf("%s: exit %d, stderr %q; want 1 mentioning %q", fx, code, errOut, reason)
			}
		}
	})

	t.Run("ListInspectsDirectoryOffline", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for _, fx := range []string{"healthy", "notwasm"} {
			b, err := os.ReadFile(fixture(t, fx))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, fx+".wasm"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errOut := run(t, "plugins", "list", "--cache-dir", cache, "--dir", dir)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		for _, want := range []string{"NAME", "healthy", "valid", "notwasm.wasm", "invalid", "not a wasm module"} {
			if !strings.Contains(out, want) {
				t.Fatalf("list output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("InspectShowsCapabilities", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := run(t, "plugins", "inspect", "--cache-dir", cache, fixture(t, "ungranted"))
		if code != 0 || !strings.Contains(out, "capabilities.fcall") || !strings.Contains(out, "ff_version") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
}

// TestPluginNew scaffolds a plugin inside the module, then proves it
// passes its own test and builds for wasip1.
func TestPluginNew(t *testing.T) {
	t.Parallel()
	if code, _, errOut := run(t, "plugin", "new", "Bad-Name"); code != 2 {
		t.Fatalf("bad name: exit %d, stderr %q; want 2", code, errOut)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(root, "plugins", "scanners")
	name := "zz_scaffold_test"
	target := filepath.Join(parent, name)
	t.Cleanup(func() { os.RemoveAll(target) })
	os.RemoveAll(target)
	code, out, errOut := run(t, "plugin", "new", "--dir", parent, name)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "created") {
		t.Fatalf("stdout %q", out)
	}
	// The validate hint names the file make plugins writes, relative to
	// the repository root the printed commands cd into.
	if want := "fabric plugins validate bin/plugins/" + name + ".wasm`"; !strings.Contains(out, want) {
		t.Fatalf("stdout must say %q:\n%s", want, out)
	}
	// The grant takes effect with a host started with the file; the build
	// step leaves out the tests' compile (make test does it).
	for _, want := range []string{`make run RUN_ARGS="--config fabric.toml"`, "$ FABRIC_PREWARM_TESTS=0 make plugins"} {
		if !strings.Contains(out, want) {
			t.Fatalf("stdout must say %q:\n%s", want, out)
		}
	}
	if code, _, _ := run(t, "plugin", "new", "--dir", parent, name); code != 1 {
		t.Fatal("scaffolding over an existing plugin must fail")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	test := exec.Command(gobin, "test", "-count=1", "./plugins/scanners/"+name)
	test.Dir = root
	if b, err := test.CombinedOutput(); err != nil {
		t.Fatalf("scaffold test failed: %v\n%s", err, b)
	}
	build := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", filepath.Join(t.TempDir(), name+".wasm"), "./plugins/scanners/"+name)
	build.Dir = root
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scaffold wasm build failed: %v\n%s", err, b)
	}
}

// TestPluginNewOutsideTheRepository scaffolds a plugin in a directory
// outside the fabric repository and runs, there, exactly the commands
// `fabric plugin new` printed (the "$ " lines): the scaffold is a module
// of its own whose go.mod reaches this checkout by a replace line, it
// passes its own tests (every lane of the registry by default, the
// "lanes" config when set) and builds for wasip1.
func TestPluginNewOutsideTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if _, in := fabricRoot(outside); in {
		t.Fatalf("%s lies inside the fabric module", outside)
	}
	code, out, errOut := run(t, "plugin", "new", "--dir", outside, "myscanner")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	target := filepath.Join(outside, "myscanner")
	gomod, err := os.ReadFile(filepath.Join(target, "go.mod"))
	if err != nil {
		t.Fatalf("no go.mod: %v\n%s", err, out)
	}
	if !strings.Contains(string(gomod), "replace github.com/fabric-host/fabric => "+root) ||
		!strings.Contains(out, "not fetchable from a module proxy") {
		t.Fatalf("go.mod must replace fabric with %s and the output say why:\n%s\n---\n%s", root, gomod, out)
	}
	var script []string
	for _, l := range strings.Split(out, "\n") {
		if cmd, ok := strings.CutPrefix(strings.TrimSpace(l), "$ "); ok {
			script = append(script, cmd)
		}
	}
	if !strings.Contains(out, "fabric plugins validate myscanner.wasm`") || !strings.Contains(out, "`fabric run --config fabric.toml`") {
		t.Fatalf("the validate hint must name the module the build writes, and the host start that reads the grant:\n%s", out)
	}
	if len(script) < 4 || strings.Contains(out, "make plugins") || strings.Contains(out, "./plugins/scanners") {
		t.Fatalf("commands for an outside module expected:\n%s", out)
	}
	// Offline: everything the scaffold needs is the checkout and the
	// module cache.
	sh := exec.Command("bash", "-euxc", strings.Join(script, "\n"))
	sh.Dir = outside
	sh.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=", "GOWORK=off",
		"PATH="+filepath.Join(runtime.GOROOT(), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	b, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the printed commands failed: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "ok  \tmyscanner") {
		t.Errorf("go test did not run the scaffold's tests:\n%s", b)
	}
	if st, err := os.Stat(filepath.Join(target, "myscanner.wasm")); err != nil || st.Size() == 0 {
		t.Fatalf("no myscanner.wasm: %v\n%s", err, b)
	}
}
