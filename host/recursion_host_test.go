package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/host"
	"github.com/fabric-host/fabric/internal/wasmgen"
)

// TestHostStartsBesideARecursingManifest: a host whose plugin directory
// holds a file whose fabric_manifest recurses with no loop finishes its
// first directory scan, refuses the file as a fault at load (its
// manifest timed out) and runs the others. It never became healthy: the
// load waited on the guest for good, and the GC on the load.
func TestHostStartsBesideARecursingManifest(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{fixtures: []string{"healthy"}, noStart: true})
	wasm, err := wasmgen.Recursive("recurse_manifest", wasmgen.InManifest, 60)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "recurse_manifest.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	var fs host.FileStatus
	for _, f := range b.host.Files() {
		if strings.HasSuffix(f.Path, "recurse_manifest.wasm") {
			fs = f
		}
	}
	if fs.State != host.StateInvalid || fs.Reason != host.RejectFault || !strings.Contains(fs.Error, "host.load.fabric_manifest after") {
		t.Fatalf("file status = %+v, want invalid, a fault at load: the manifest timed out", fs)
	}
	requireCadence(t, b, "healthy", 4)
}
