package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabric-host/fabric/host"
)

// copyStock copies stock plugins from bin/plugins into the plugin
// directory dir with their signatures, and the key `make plugins` signed
// them with beside dir (defaultKeyName): `fabric run --plugins dir` then
// trusts that key without --trusted-keys, as `make run` does with
// bin/plugins, and grants the stock plugins their stock grants.
func copyStock(t *testing.T, dir string, names ...string) {
	t.Helper()
	src := filepath.Join("..", "..", "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cp := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatalf("%v (run `make plugins` first)", err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		cp(filepath.Join(src, "plugins", name+".wasm"+host.SignatureSuffix), filepath.Join(dir, name+".wasm"+host.SignatureSuffix))
		cp(filepath.Join(src, "plugins", name+".wasm"), filepath.Join(dir, name+".wasm"))
	}
	cp(filepath.Join(src, defaultKeyName), filepath.Join(filepath.Dir(filepath.Clean(dir)), defaultKeyName))
}

// TestStockGrantNeedsTheStockSignature: `fabric plugins validate` (as
// `fabric run` would) grants a stock plugin its stock grant when the file
// carries a signature by the key beside its directory (bin/plugins with
// bin/plugin-signing.pub, what `make plugins` writes); the squatter
// declaring quota_reconciler, copied in as quota_reconciler.wasm beside
// that key but unsigned, is refused, the binding named. The squatter
// under another name is refused by a running host (TestHostileSoak).
func TestStockGrantNeedsTheStockSignature(t *testing.T) {
	t.Parallel()
	cache := defaultCacheDir()
	dir := filepath.Join(t.TempDir(), "plugins")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyStock(t, dir, "quota_reconciler")
	stock := filepath.Join(dir, "quota_reconciler.wasm")
	if code, out, errOut := run(t, "plugins", "validate", "--cache-dir", cache, stock); code != 0 || !strings.HasPrefix(out, "ok: quota_reconciler ") {
		t.Fatalf("the signed stock file: exit %d\n%s%s", code, out, errOut)
	}
	if err := os.Remove(stock + ".sig"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fixture(t, "squatter"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stock, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "plugins", "validate", "--cache-dir", cache, stock)
	if code != 1 || !strings.Contains(errOut, "write ff:quota:* not granted") ||
		!strings.Contains(errOut, "applies only to a file with a signature by a trusted key; this one is unsigned") {
		t.Fatalf("the unsigned impostor: exit %d, %s", code, errOut)
	}
}
