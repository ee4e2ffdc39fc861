package host_test

import (
	"os/exec"
	"slices"
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

// driverBridges are the packages below host still allowed to import a
// driver: the Valkey implementation of plugin data (hostfn.ValkeyStore,
// the sql_query session over pgx). The host reaches it only through
// interfaces (Backend, hostfn.Store, hostfn.SQLDB). Shrink this list;
// never grow it.
var driverBridges = []string{
	"github.com/fabric-host/fabric/host/hostfn",
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
// drivers implement (config.go, backends.go). Among everything host
// depends on, only the packages of driverBridges import a driver.
func TestHostImportsNoDriver(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}",
		"github.com/fabric-host/fabric/host").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	seen := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if isDriver(pkg) || !strings.HasPrefix(pkg, "github.com/fabric-host/fabric/") {
			continue
		}
		seen++
		for imp := range strings.FieldsSeq(imports) {
			if !isDriver(imp) {
				continue
			}
			if pkg == "github.com/fabric-host/fabric/host" || !slices.Contains(driverBridges, pkg) {
				t.Errorf("%s imports %s: the host reaches a backend only through interfaces (host.Backend, hostfn.Store, hostfn.SQLDB)", pkg, imp)
			}
		}
	}
	if seen < 2 {
		t.Fatalf("go list -deps listed %d fabric packages; want host and its dependencies:\n%s", seen, out)
	}
}
