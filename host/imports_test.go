package host_test

import (
	"os/exec"
	"strings"
	"testing"
)

// driverImports are the import paths that make a package depend on a
// backend's client library: valkey-go and pgx, and fabric's drivers over
// them.
var driverImports = []string{
	"github.com/valkey-io/valkey-go",
	"github.com/jackc/pgx/",
	"github.com/fabric-host/fabric/backend/valkey",
	"github.com/fabric-host/fabric/backend/postgres",
}

func isDriver(path string) bool {
	for _, d := range driverImports {
		if path == strings.TrimSuffix(d, "/") || strings.HasPrefix(path, d) ||
			strings.HasPrefix(path, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// TestHostImportsNoDriver: package host imports neither valkey-go nor pgx
// nor a driver package; what it needs of a backend are interfaces the
// drivers implement (config.go, backends.go), and nothing host depends on
// imports one either: host/hostfn's plugin data and sql_query run on
// hostseam.PluginData and hostseam.PluginSQL (internal/hostseam), which backend/valkey and
// backend/postgres implement. The SDK is held to the same: it works
// through backend.Driver (errors classified by backend.CodeOf,
// Driver.IsTransient and backend.EndedBy), and cmd/fabric or the user
// wires a driver in.
func TestHostImportsNoDriver(t *testing.T) {
	for _, root := range []string{"github.com/fabric-host/fabric/host", "github.com/fabric-host/fabric/sdk"} {
		t.Run(root[strings.LastIndex(root, "/")+1:], func(t *testing.T) { checkNoDriver(t, root) })
	}
}

// checkNoDriver fails for every package root depends on that is or
// imports a driver.
func checkNoDriver(t *testing.T, root string) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", root).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	seen := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if isDriver(pkg) {
			t.Errorf("%s depends on %s: no package it depends on may import a driver", root, pkg)
			continue
		}
		if !strings.HasPrefix(pkg, "github.com/fabric-host/fabric/") {
			continue
		}
		seen++
		for imp := range strings.FieldsSeq(imports) {
			if !isDriver(imp) {
				continue
			}
			t.Errorf("%s imports %s: %s reaches a backend only through the contract's interfaces (backend.Driver, hostseam.PluginData, hostseam.PluginSQL)", pkg, imp, root)
		}
	}
	if seen < 2 {
		t.Fatalf("go list -deps listed %d fabric packages; want %s and its dependencies:\n%s", seen, root, out)
	}
}
