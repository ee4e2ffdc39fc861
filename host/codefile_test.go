//go:build linux

package host

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/fabric-host/fabric/abi"
)

// mappingOf returns the path /proc/self/maps names for the mapping that
// holds addr ("" for anonymous memory).
func mappingOf(t *testing.T, addr uintptr) (string, bool) {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		lo, hi, _ := strings.Cut(fields[0], "-")
		l, _ := strconv.ParseUint(lo, 16, 64)
		h, _ := strconv.ParseUint(hi, 16, 64)
		if uint64(addr) >= l && uint64(addr) < h {
			if len(fields) >= 6 {
				return fields[5], true
			}
			return "", true
		}
	}
	return "", false
}

// TestFileBackedCode: a plugin's machine code runs from a read-only file
// mapping of its own bytes under the code dir (wazero's state pinned by
// go.mod: a wazero upgrade that moves it fails here); two Modules of one
// file share it; the first closing leaves the second running, and the
// last closing closes the compiled module (no machine code is left behind
// by a hot swap).
func TestFileBackedCode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lc := benchLoader(t, benchCache(t))
	lc.codeDir = filepath.Join(t.TempDir(), codeDirName)
	path := benchFixture(t, "healthy")
	a, err := loadModule(ctx, path, lc)
	if err != nil {
		t.Fatal(err)
	}
	code, known := compiledCode(a.main)
	if !known || len(code) == 0 {
		t.Fatal("compiledCode found no machine code (wazero's compiled module changed shape?)")
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(code)))
	if a.codeKey != addr {
		t.Fatalf("codeKey %#x, code at %#x", a.codeKey, addr)
	}
	file, ok := mappingOf(t, addr)
	if !ok || filepath.Dir(file) != lc.codeDir || !strings.HasSuffix(file, ".code") {
		t.Fatalf("code at %#x is mapped from %q, want a file under %s", addr, file, lc.codeDir)
	}
	onDisk, err := os.ReadFile(file)
	if err != nil || string(onDisk) != string(code) {
		t.Fatalf("code file %s differs from the code in memory (%v)", file, err)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Fatalf("code file %s is writable: %v %v", file, st.Mode(), err)
	}

	b, err := loadModule(ctx, path, lc)
	if err != nil {
		t.Fatal(err)
	}
	if b.codeKey != a.codeKey {
		t.Fatalf("a second Module of one file has its own code (%#x, %#x)", b.codeKey, a.codeKey)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// b still makes fresh instances (the engine's compiled module stays)
	// and runs them, after trimCode dropped the code's resident pages.
	inst, err := b.newInstance(ctx)
	if err != nil {
		t.Fatalf("instance after the other Module closed: %v", err)
	}
	out, err := b.callInstance(ctx, inst, abi.ExportManifest, nil, b.fns(b, ""))
	inst.close(ctx)
	var man abi.Manifest
	if err != nil || man.UnmarshalBinary(out) != nil || man.Name == "" {
		t.Fatalf("manifest from a fresh instance: %+v, %v", man, err)
	}
	main := b.main
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if code, known := compiledCode(main); !known || code != nil {
		t.Fatalf("the engine still holds the compiled module after its last Module closed (%d bytes)", len(code))
	}
	liveCode.mu.Lock()
	_, left := liveCode.uses[addr]
	liveCode.mu.Unlock()
	if left {
		t.Fatal("liveCode still counts the closed module's code")
	}
}

// TestCodeFileUseMarked: reopening a machine code file marks it used.
func TestCodeFileUseMarked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.code")
	code := []byte("machine code")
	f, err := openCodeFile(path, code)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	old := time.Now().Add(-72 * time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if f, err = openCodeFile(path, code); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, err := os.Stat(path); err != nil || st.ModTime().Before(before.Add(-time.Second)) {
		t.Fatalf("code file not marked used: %v %v", st.ModTime(), err)
	}
}
