//go:build linux

package host

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/tetratelabs/wazero"
)

// dataFile is a module's data segments mapped from a file (fileBackData).
type dataFile struct {
	mapped []byte
	// module is wazero's decoded module, whose cleanup unmaps mapped:
	// held here so that trim never runs on an unmapped range.
	module *byte
}

// fileBackData moves the bytes of a compiled module's data segments off
// the Go heap onto a read-only mapping of a file holding them
// (dir/<sha256>.data, written once and shared by every host on the
// machine, pruned with the compilation cache). wazero reads them only to
// initialise an instance's memory, yet kept them on the Go heap for the
// module's life: ~1.6 MiB a stock Go plugin, after compactData. Their
// pages are resident only while an instance is made (trim drops them
// after). The mapping is unmapped once wazero's decoded module is
// unreachable (no instance of it can read it then). Any failure leaves
// the bytes where they were.
func fileBackData(cm wazero.CompiledModule, dir string) (*dataFile, error) {
	inits, module, ok := decodedDataSegments(cm)
	if !ok {
		return nil, fmt.Errorf("host: wazero's data segments have an unknown shape")
	}
	n := 0
	for _, p := range inits {
		n += len(*p)
	}
	if n == 0 {
		return nil, nil
	}
	all := make([]byte, 0, n)
	for _, p := range inits {
		all = append(all, *p...)
	}
	sum := sha256.Sum256(all)
	path := filepath.Join(dir, hex.EncodeToString(sum[:])+".data")
	f, err := openCodeFile(path, all) // checks the file holds exactly all
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("host: map data segments from %s: %w", path, err)
	}
	off := 0
	for _, p := range inits {
		l := len(*p)
		*p = m[off : off+l : off+l]
		off += l
	}
	runtime.AddCleanup(module, func(m []byte) { _ = syscall.Munmap(m) }, m)
	d := &dataFile{mapped: m, module: module}
	d.trim()
	return d, nil
}

// trim drops the mapping's resident pages (MADV_DONTNEED: the file's pages
// stay in the page cache; an instance made later reads them at a minor
// fault). Run after an instance is made.
func (d *dataFile) trim() {
	if d != nil {
		_ = dropCodePages(d.mapped)
	}
}
