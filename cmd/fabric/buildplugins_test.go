package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildPluginsSaysWhatFailed runs scripts/build-plugins.sh in a
// scratch tree with a stand-in go command: when a step fails (the prewarm
// that inspects bin/plugins, or the signing), the script names the file
// and the reason instead of exiting 1 in silence (make then printed only
// "Error 1").
func TestBuildPluginsSaysWhatFailed(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../../scripts/build-plugins.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, stub string
		want       []string
	}{
		{
			name: "PrewarmFindsAnInvalidFile",
			// What `go test -run TestFixturesValidate ./host/` prints for a
			// file in bin/plugins the host refuses.
			stub: `test) printf -- '--- FAIL: TestFixturesValidate (0.02s)\n    fixtures_test.go:51: ../bin/plugins/junk.wasm: host: not a wasm module\nFAIL\n'; exit 1 ;;`,
			want: []string{"plugins: prewarm", "bin/plugins/junk.wasm: host: not a wasm module", "fabric plugins validate FILE"},
		},
		{
			name: "SigningRefusesAFile",
			stub: `run) case "$*" in *sign*) echo "fabric plugins sign: sign bin/plugins/junk.wasm: host: not a wasm module" >&2; exit 1 ;; esac ;;`,
			want: []string{"sign bin/plugins/junk.wasm: host: not a wasm module", "build-plugins.sh: failed (exit 1) at line", "plugins sign"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for _, d := range []string{"scripts", "bin/plugins", "plugins/scanners/x"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			stub := "#!/bin/sh\ncase \"$1\" in\n" + tc.stub + `
build) while [ $# -gt 0 ]; do [ "$1" = -o ] && echo wasm > "$2"; shift; done ;;
esac
exit 0
`
			for path, body := range map[string]string{
				"scripts/build-plugins.sh":   string(script),
				"plugins/scanners/x/main.go": "package main\n",
				"bin/plugins/junk.wasm":      "not wasm\n",
				"bin/plugin-signing.key":     "k\n",
				"go-stub":                    stub,
			} {
				if err := os.WriteFile(filepath.Join(root, path), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-plugins.sh"))
			cmd.Env = append(os.Environ(), "GO="+filepath.Join(root, "go-stub"), "FABRIC_SIGNING_KEY=")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the script succeeded:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestBuildPluginsSignsOnlyWhatItBuilt runs scripts/build-plugins.sh in a
// scratch tree with a stand-in go command: it signs the stock file it
// built (x.wasm) and leaves a file copied into bin/plugins unsigned,
// saying so, on the first run and on the next; a stock file changed
// after its signing is built again from its source, then signed.
func TestBuildPluginsSignsOnlyWhatItBuilt(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../../scripts/build-plugins.sh")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, d := range []string{"scripts", "bin/plugins", "plugins/scanners/x"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The stand-in builds "wasm" files and signs each file it is given
	// (FILE.sig naming it), as `fabric plugins sign` would.
	stub := `#!/bin/sh
case "$1" in
build) while [ $# -gt 0 ]; do [ "$1" = -o ] && echo "built from source" > "$2"; shift; done ;;
run) case "$*" in *"plugins sign"*) for f in "$@"; do case $f in *.wasm) echo "sig of $f" > "$f.sig" ;; esac; done ;; esac ;;
esac
exit 0
`
	for path, body := range map[string]string{
		"scripts/build-plugins.sh":    string(script),
		"plugins/scanners/x/main.go":  "package main\n",
		"bin/plugins/unreviewed.wasm": "copied in, never reviewed\n",
		"bin/plugin-signing.key":      "k\n",
		"go-stub":                     stub,
	} {
		if err := os.WriteFile(filepath.Join(root, path), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := func() string {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-plugins.sh"))
		cmd.Env = append(os.Environ(), "GO="+filepath.Join(root, "go-stub"), "FABRIC_SIGNING_KEY=", "FABRIC_PREWARM=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("build-plugins.sh: %v\n%s", err, out)
		}
		return string(out)
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, rel))
		return err == nil
	}
	const said = "plugins: bin/plugins/unreviewed.wasm left unsigned: not built from this tree"
	for run := 1; run <= 2; run++ {
		out := build()
		if !exists("bin/plugins/x.wasm.sig") {
			t.Fatalf("run %d: the stock file it built is not signed:\n%s", run, out)
		}
		if exists("bin/plugins/unreviewed.wasm.sig") {
			t.Fatalf("run %d: the unreviewed file was signed:\n%s", run, out)
		}
		if !strings.Contains(out, said) {
			t.Fatalf("run %d: output does not say the unreviewed file was left unsigned:\n%s", run, out)
		}
	}
	// A stock file replaced after its signing: built again, then signed.
	x := filepath.Join(root, "bin", "plugins", "x.wasm")
	if err := os.WriteFile(x, []byte("tampered\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := build()
	if b, _ := os.ReadFile(x); string(b) != "built from source\n" || !strings.Contains(out, "plugins: 1 signed") {
		t.Fatalf("a replaced stock file: now %q, output:\n%s", b, out)
	}
}
