// Command wasmgen writes a hand-built plugin module (package wasmgen):
//
//	wasmgen -recurse fabric_scan -depth 60 -name recurse_scan testdata/plugins/recurse_scan.wasm
//
// scripts/build-plugins.sh makes testdata/plugins/recurse_scan.wasm with
// it; the tests build the others in memory.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fabric-host/fabric/internal/wasmgen"
)

func main() {
	at := flag.String("recurse", string(wasmgen.InScan), "where it recurses: fabric_scan, fabric_manifest, _initialize or start (the start function)")
	depth := flag.Int("depth", 60, "recursion depth (2^(depth+1)-1 calls)")
	name := flag.String("name", "recurse_scan", "plugin name in the manifest")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: wasmgen [flags] FILE\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := write(flag.Arg(0), *name, wasmgen.Where(*at), *depth); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// write writes the module to path through a temporary file, so that a
// reader never sees half of it.
func write(path, name string, at wasmgen.Where, depth int) error {
	if depth < 0 || depth > 1<<30 {
		return fmt.Errorf("wasmgen: -depth %d: want 0 to %d", depth, 1<<30)
	}
	b, err := wasmgen.Recursive(name, at, int32(depth))
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("wasmgen: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("wasmgen: %w", err)
	}
	return nil
}
