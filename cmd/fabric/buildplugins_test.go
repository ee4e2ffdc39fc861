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
