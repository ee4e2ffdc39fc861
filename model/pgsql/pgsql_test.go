package pgsql_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/abi"
	"github.com/fabric-host/fabric/model/pgsql"
)

var param = regexp.MustCompile(`\$(\d+)`)

// TestCatalog: every statement binds exactly its documented parameters,
// names only tables it declares, and can be granted in a manifest.
func TestCatalog(t *testing.T) {
	t.Parallel()
	tables := regexp.MustCompile(`\bff_[a-z_]+\b`)
	for _, s := range pgsql.All {
		top := 0
		for _, m := range param.FindAllStringSubmatch(s.SQL, -1) {
			n, _ := strconv.Atoi(m[1])
			top = max(top, n)
		}
		if top != len(s.Params) {
			t.Errorf("%s uses $%d but documents %d params", s.Name, top, len(s.Params))
		}
		for _, tb := range tables.FindAllString(s.SQL, -1) {
			if strings.HasSuffix(tb, "_idx") {
				continue
			}
			found := false
			for _, d := range s.Tables {
				found = found || d == tb
			}
			if !found {
				t.Errorf("%s touches %s without declaring it", s.Name, tb)
			}
		}
		if got, ok := pgsql.Lookup(s.Name); !ok || got.SQL != s.SQL {
			t.Errorf("Lookup(%s)", s.Name)
		}
	}
	m := abi.Manifest{ABI: abi.Version, Name: "x", Version: "1.0.0", Capabilities: abi.Capabilities{SQL: pgsql.Grants(pgsql.All...)}}
	m.ApplyDefaults()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if g := pgsql.Grants(pgsql.ExecCoreLock, pgsql.ExecCoreLock); len(g) != 2 || g[1] != "table.ff_exec_core" {
		t.Fatalf("grants %v", g)
	}
}
