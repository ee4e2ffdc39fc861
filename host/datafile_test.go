//go:build linux

package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/fabric-host/fabric/abi"
)

// TestFileBackedData: a module compiled with a code directory has its
// data segments' bytes in a read-only file mapping under it (not on the Go
// heap), holding exactly what wazero decoded; instances made afterwards,
// once the mapping's pages were dropped, start and answer as before.
func TestFileBackedData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lc := benchLoader(t, benchCache(t))
	lc.codeDir = filepath.Join(t.TempDir(), codeDirName)
	path := benchFixture(t, "healthy")
	m, err := loadModule(ctx, path, lc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if m.data == nil {
		t.Fatal("the module's data segments were not file-backed")
	}
	inits, _, ok := decodedDataSegments(m.main)
	if !ok || len(inits) == 0 {
		t.Fatal("dataSegments found no data segments (wazero's module changed shape?)")
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(m.data.mapped)))
	hi := lo + uintptr(len(m.data.mapped))
	var all []byte
	for i, p := range inits {
		a := uintptr(unsafe.Pointer(unsafe.SliceData(*p)))
		if len(*p) > 0 && (a < lo || a+uintptr(len(*p)) > hi) {
			t.Fatalf("segment %d (%d bytes at %#x) is outside the mapping [%#x, %#x)", i, len(*p), a, lo, hi)
		}
		all = append(all, *p...)
	}
	file, ok := mappingOf(t, lo)
	if !ok || filepath.Dir(file) != lc.codeDir || !strings.HasSuffix(file, ".data") {
		t.Fatalf("data at %#x is mapped from %q, want a .data file under %s", lo, file, lc.codeDir)
	}
	onDisk, err := os.ReadFile(file)
	if err != nil || string(onDisk) != string(all) {
		t.Fatalf("data file %s differs from the segments (%v)", file, err)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Fatalf("data file %s is writable: %v %v", file, st.Mode(), err)
	}
	for range 2 {
		inst, err := m.newInstance(ctx)
		if err != nil {
			t.Fatalf("instance from file-backed data: %v", err)
		}
		out, err := m.callInstance(ctx, inst, abi.ExportManifest, nil, m.fns(m, ""))
		inst.close(ctx)
		var man abi.Manifest
		if err != nil || man.UnmarshalBinary(out) != nil || man.Name != m.Manifest().Name {
			t.Fatalf("manifest from a fresh instance: %+v, %v", man, err)
		}
	}
}
