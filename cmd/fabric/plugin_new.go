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

func init() {
	register(&command{
		name:    "plugin new",
		usage:   "NAME",
		summary: "Scaffold a scanner plugin (main.go + a pdktest unit test) that builds and passes its own test.",
		setup: func(fs *flag.FlagSet) func(context.Context, *cliEnv, []string) error {
			dir := fs.String("dir", filepath.Join("plugins", "scanners"), "parent directory of the new plugin package")
			return func(ctx context.Context, env *cliEnv, args []string) error {
				if len(args) != 1 {
					return fmt.Errorf("%w: want one NAME", errUsage)
				}
				name := args[0]
				if !validPluginName(name) {
					return fmt.Errorf("%w: NAME %q: want lowercase letters, digits and '_', starting with a letter", errUsage, name)
				}
				target := filepath.Join(*dir, name)
				if _, err := os.Stat(target); err == nil {
					return fmt.Errorf("%s already exists", target)
				} else if !errors.Is(err, os.ErrNotExist) {
					return err
				}
				if err := os.MkdirAll(target, 0o755); err != nil {
					return err
				}
				for file, tmpl := range map[string]*template.Template{"main.go": scaffoldMain, "main_test.go": scaffoldTest} {
					var b strings.Builder
					if err := tmpl.Execute(&b, map[string]string{"Name": name}); err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(target, file), []byte(b.String()), 0o644); err != nil {
						return err
					}
				}
				fmt.Fprintf(env.stdout, "created %s\n  test:  go test ./%s\n  build: make plugins  (-> bin/plugins/%s.wasm)\n", target, filepath.ToSlash(target), name)
				return nil
			}
		},
	})
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

var scaffoldMain = template.Must(template.New("main").Parse(`// Command {{.Name}} is a fabric scanner plugin.
//
// It scans the delayed index of each lane for due items and calls
// ff_promote_delayed on them; change Indexes, Call and the capabilities to
// make it your own.
package main

import (
	"strconv"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/pdk"
)

// Plugin is the plugin, registered in init.
var Plugin = pdk.Plugin{
	Manifest: abi.Manifest{
		Name:       "{{.Name}}",
		Version:    "0.1.0",
		Kind:       abi.KindScanner,
		IntervalMs: 1000,
		Family:     "flow",
		BatchSize:  50,
		TimeoutMs:  5000,
		Capabilities: abi.Capabilities{
			FCall: []string{"ff_promote_delayed"},
			Read:  []string{"ff:idx:*:lane:*:delayed"},
		},
	},
	Scan: scan,
}

func init() { pdk.Register(Plugin) }

func main() {}

func scan(h pdk.Host, req abi.ScanRequest) abi.ScanResult {
	keys := model.KeysOn(req.Partition)
	return pdk.DueScan{
		Indexes: func(abi.ScanRequest) []string { return []string{keys.LaneDelayed("default")} },
		Call: func(d pdk.Due) []abi.Call {
			call := abi.Call{
				Function: "ff_promote_delayed",
				Keys:     []string{model.KeysFor(model.ExecutionID(d.Member)).Core(), d.Index, keys.LaneEligible("default")},
				Args:     []string{d.Member, strconv.FormatInt(d.NowMs, 10)},
			}
			return []abi.Call{call}
		},
	}.Run(h, req)
}
`))

var scaffoldTest = template.Must(template.New("test").Parse(`package main

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

func TestScanActsOnDueItems(t *testing.T) {
	t.Parallel()
	part := model.Partition{Family: model.FamilyFlow, Index: 1}
	h := pdktest.New(t, Plugin.Manifest)
	h.NowMs = 5_000
	id := model.NewExecutionID(part, model.NewUUID())
	h.ZAdd(model.KeysOn(part).LaneDelayed("default"), 4_000, string(id))
	h.Handle("ff_promote_delayed", func(keys, args []string) abi.CallResult {
		return abi.CallResult{Result: abi.StatusOK, Status: "OK"}
	})
	if res := h.Scan(Plugin, part, 1); res.Scanned != 1 || res.Acted != 1 {
		t.Fatalf("result = %+v, want 1 scanned, 1 acted", res)
	}
}
`))
