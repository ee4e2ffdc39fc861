package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// fabricModule is the module path of this repository.
const fabricModule = "github.com/fabric-host/fabric"

func init() {
	register(&command{
		name:  "plugin new",
		usage: "NAME",
		summary: "Scaffold a scanner plugin (main.go + a pdktest unit test) that builds and passes its own test. " +
			"Inside the fabric repository it goes to plugins/scanners/NAME; elsewhere it is a module of its own (./NAME), " +
			"its go.mod pointing at a local fabric checkout.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			dir := fs.String("dir", "", "parent directory of the new plugin (default: plugins/scanners inside the fabric repository, else .)")
			checkout := fs.String("fabric", "", "the fabric checkout a plugin outside the repository builds against (default: the one this binary or the current directory lies in)")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want one NAME", errUsage)
				}
				name := args[0]
				if !validPluginName(name) {
					return fmt.Errorf("%w: NAME %q: want lowercase letters, digits and '_', starting with a letter", errUsage, name)
				}
				parent := *dir
				if parent == "" {
					parent = "."
					if root, ok := fabricRoot("."); ok {
						parent = filepath.Join(root, "plugins", "scanners")
					}
				}
				target, err := filepath.Abs(filepath.Join(parent, name))
				if err != nil {
					return err
				}
				if _, err := os.Stat(target); err == nil {
					return fmt.Errorf("%s already exists", target)
				} else if !errors.Is(err, os.ErrNotExist) {
					return err
				}
				root, inRepo := fabricRoot(filepath.Dir(target))
				files := map[string]*template.Template{"main.go": scaffoldMain, "main_test.go": scaffoldTest}
				var gomod string
				replaceDir := ""
				if !inRepo {
					replaceDir = *checkout
					if replaceDir == "" {
						replaceDir = findCheckout()
					} else if r, ok := fabricRoot(replaceDir); ok {
						replaceDir = r
					} else {
						return fmt.Errorf("--fabric %s: not a fabric checkout (no go.mod of %s there)", replaceDir, fabricModule)
					}
					gomod = scaffoldGoMod(name, replaceDir)
				}
				if err := os.MkdirAll(target, 0o755); err != nil {
					return err
				}
				for file, tmpl := range files {
					var b strings.Builder
					if err := tmpl.Execute(&b, map[string]string{"Name": name}); err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(target, file), []byte(b.String()), 0o644); err != nil {
						return err
					}
				}
				w := env.stdout
				// wasm is where the printed commands leave the module,
				// relative to the directory they end in.
				wasm := name + ".wasm"
				if inRepo {
					wasm = "bin/plugins/" + name + ".wasm"
					rel, err := filepath.Rel(root, target)
					if err != nil {
						return err
					}
					fmt.Fprintf(w, "created %s (a package of the fabric module)\n", target)
					// FABRIC_PREWARM_TESTS=0: plain make plugins also compiles
					// every module for the tests' cache after a build (minutes;
					// make test does it when it needs it).
					fmt.Fprintf(w, "  $ cd %s\n  $ go test ./%s\n  $ FABRIC_PREWARM_TESTS=0 make plugins   # -> bin/plugins/%s.wasm\n", root, filepath.ToSlash(rel), name)
				} else {
					if err := os.WriteFile(filepath.Join(target, "go.mod"), []byte(gomod), 0o644); err != nil {
						return err
					}
					// The checkout's checksums: go mod tidy then needs no
					// checksum database for fabric's own dependencies.
					if replaceDir != "" {
						if sum, err := os.ReadFile(filepath.Join(replaceDir, "go.sum")); err == nil {
							if err := os.WriteFile(filepath.Join(target, "go.sum"), sum, 0o644); err != nil {
								return err
							}
						}
					}
					fmt.Fprintf(w, "created %s, a module of its own (module %s)\n", target, name)
					if replaceDir != "" {
						fmt.Fprintf(w, "%s is not fetchable from a module proxy, so go.mod replaces it with your checkout:\n  replace %s => %s\n", fabricModule, fabricModule, replaceDir)
					} else {
						fmt.Fprintf(w, "%s is not fetchable from a module proxy and no fabric checkout was found: add to go.mod\n  replace %s => /path/to/your/fabric/checkout\n(or run again with --fabric DIR)\n", fabricModule, fabricModule)
					}
					fmt.Fprintf(w, "  $ cd %s\n  $ go mod tidy\n  $ go test ./...\n  $ GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o %s.wasm .\n", target, name)
					fmt.Fprintf(w, "then copy %s.wasm into the host's plugin directory (bin/plugins of `fabric run`);\n", name)
				}
				// A host reads fabric.toml when it starts: the grant takes
				// effect with a host started (or restarted) with --config.
				fabric, start := "fabric", "fabric run --config fabric.toml"
				if inRepo {
					fabric, start = "bin/fabric", `make run RUN_ARGS="--config fabric.toml"`
				}
				fmt.Fprintf(w, "the host runs it once fabric.toml grants what it requests: `%s plugins validate %s` prints the [plugins.%s.grant] to add\n", fabric, wasm, name)
				fmt.Fprintf(w, "(append it with `>> fabric.toml` and review it), then start the host with the file: `%s`.\n", start)
				fmt.Fprintf(w, "It scans the lanes of its \"lanes\" config (default: every lane of the lane registry, the demo's demo-a/b/c included).\n")
				return nil
			}
		},
	})
}

// fabricRoot returns the root of the fabric module dir lies in, if any.
func fabricRoot(dir string) (string, bool) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			return d, modfileModule(b) == fabricModule
		}
		up := filepath.Dir(d)
		if up == d {
			return "", false
		}
		d = up
	}
}

// modfileModule returns the module path a go.mod declares.
func modfileModule(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// findCheckout is the fabric checkout this binary was built in
// (bin/fabric), else the one the current directory lies in, else "".
func findCheckout() string {
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if root, ok := fabricRoot(filepath.Dir(exe)); ok {
				return root
			}
		}
	}
	if root, ok := fabricRoot("."); ok {
		return root
	}
	return ""
}

// scaffoldGoMod is the go.mod of a plugin outside the repository: it
// requires fabric (for pdk, abi and model), replaced by the local checkout
// when one is known.
func scaffoldGoMod(name, checkout string) string {
	goVersion := "1.26.0"
	if checkout != "" {
		if b, err := os.ReadFile(filepath.Join(checkout, "go.mod")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
					goVersion = strings.TrimSpace(v)
				}
			}
		}
	}
	s := fmt.Sprintf("module %s\n\ngo %s\n\nrequire %s v0.0.0-00010101000000-000000000000\n", name, goVersion, fabricModule)
	if checkout != "" {
		s += fmt.Sprintf("\n// %s is not on a module proxy: build against a local checkout.\nreplace %s => %s\n", fabricModule, fabricModule, checkout)
	}
	return s
}

func validPluginName(s string) bool {
	if s == "" || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

var scaffoldMain = template.Must(template.New("main").Delims("[[", "]]").Parse(`// Command [[.Name]] is a fabric scanner plugin.
//
// It scans the delayed index of each lane for due items and calls
// ff_promote_delayed on them; change Indexes, Call and the capabilities to
// make it your own.
//
// Configuration: "lanes", a comma-separated lane list (default: every lane
// of the lane registry, see pdk.Lanes), set in fabric.toml:
//
//	[plugins.[[.Name]]]
//	config = { lanes = "demo-a,demo-b" }
package main

import (
	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/fcall"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the plugin, registered in init.
var Plugin = pdk.Plugin{
	Manifest: manifest(),
	Scan:     scan,
}

// manifest asks for a sweep every 1000 ms, 50 items per index and call,
// and the capabilities its scan uses (plus the lane registry and the
// scanner filter's reads, which pdk.Scanner adds).
func manifest() abi.Manifest {
	m := pdk.Scanner("[[.Name]]", 1000, 50, []string{"ff_promote_delayed"}, []string{"ff:idx:*:lane:*:delayed"}, nil)
	m.Version = "0.1.0"
	return m
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	keys := model.KeysOn(req.Partition)
	lanes := pdk.Lanes(h)
	indexes := make([]string, len(lanes))
	laneOf := make(map[string]string, len(lanes))
	for i, l := range lanes {
		indexes[i] = keys.LaneDelayed(l)
		laneOf[indexes[i]] = l
	}
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return indexes },
		// model/fcall builds ff_promote_delayed's KEYS and ARGV, as the
		// host's own driver does.
		Call: func(d pdk.Due) []abi.Call {
			p := fcall.PromoteDelayedParams{ExecutionID: model.ExecutionID(d.Member), Lane: laneOf[d.Index], NowMs: d.NowMs}
			return []abi.Call{pdk.CallOf(p.Call())}
		},
	}.Run(h, req)
}
`))

var scaffoldTest = template.Must(template.New("test").Delims("[[", "]]").Parse(`package main

import (
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk/pdktest"
)

func TestManifestIsValid(t *testing.T) {
	t.Parallel()
	m := Plugin.Manifest
	m.ABI = abi.Version
	m.ApplyDefaults()
	if err := m.Validate(); err != nil {
		t.Fatalf("manifest: %v", err)
	}
}

// scanLane puts one due item in lane's delayed index and scans.
func scanLane(t *testing.T, lane string, config map[string]string, registry ...string) abi.ScanResult {
	t.Helper()
	part := model.Partition{Family: model.FamilyFlow, Index: 1}
	h := pdktest.New(t, Plugin.Manifest)
	h.NowMs = 5_000
	for k, v := range config {
		h.ConfigValues[k] = v
	}
	if len(registry) > 0 {
		h.SAdd(model.KeyLanesIndex, registry...)
	}
	id := model.NewExecutionID(part, model.NewUUID())
	h.ZAdd(model.KeysOn(part).LaneDelayed(lane), 4_000, string(id))
	h.Handle("ff_promote_delayed", func(keys, args []string) abi.CallResult {
		return abi.CallResult{Result: abi.StatusOK, Status: "OK"}
	})
	return h.Scan(Plugin, part, 1)
}

// Without a "lanes" config it scans every lane of the registry.
func TestScanActsOnDueItemsOfEveryLane(t *testing.T) {
	if res := scanLane(t, "demo-b", nil, "demo-a", "demo-b", "demo-c"); res.Scanned != 1 || res.Acted != 1 {
		t.Fatalf("result = %+v, want 1 scanned, 1 acted", res)
	}
}

// With one it scans those lanes only.
func TestScanHonoursLanesConfig(t *testing.T) {
	if res := scanLane(t, "mine", map[string]string{"lanes": "mine"}); res.Acted != 1 {
		t.Fatalf("configured lane: result = %+v, want 1 acted", res)
	}
	if res := scanLane(t, "other", map[string]string{"lanes": "mine"}); res.Scanned != 0 {
		t.Fatalf("lane not configured: result = %+v, want nothing scanned", res)
	}
}
`))
