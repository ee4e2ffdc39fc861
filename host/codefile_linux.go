//go:build linux

package host

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// fileBackCode moves a module's machine code from the anonymous memory
// wazero copied it into onto a read-only file mapping of the same bytes
// at the same address (dir/<sha256>.code, written once and shared by
// every host on the machine). Anonymous pages stay resident for the
// process's life; a file's pages are resident only once executed, are
// shared between processes, and the kernel can drop and re-read them. A
// Go guest executes a small part of its code (the runtime's paths an idle
// scan takes), so most of a plugin's ~12 MiB of machine code is never
// resident.
//
// The bytes in the file are compared with the code in memory before the
// mapping replaces it, so a stale or foreign file is rewritten, never
// executed. Any failure leaves the anonymous code as it was.
func fileBackCode(code []byte, dir string) error {
	n := len(code)
	page := uintptr(os.Getpagesize())
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(code)))
	if n == 0 || addr%page != 0 {
		return fmt.Errorf("host: machine code at %#x (%d bytes) is not a page-aligned mapping", addr, n)
	}
	sum := sha256.Sum256(code)
	path := filepath.Join(dir, hex.EncodeToString(sum[:])+".code")
	f, err := openCodeFile(path, code)
	if err != nil {
		return err
	}
	defer f.Close()
	// A mapping the kernel refuses (a noexec mount) is refused here, where
	// the code is not touched: MAP_FIXED below may unmap the old pages
	// before it fails.
	probe, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_EXEC, syscall.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("host: map machine code from %s: %w", path, err)
	}
	_ = syscall.Munmap(probe)
	// MAP_FIXED replaces the anonymous pages in place: the same bytes at
	// the same address, read-only and executable as the code needs.
	got, _, errno := syscall.Syscall6(syscall.SYS_MMAP, addr, uintptr(n), syscall.PROT_READ|syscall.PROT_EXEC,
		syscall.MAP_PRIVATE|syscall.MAP_FIXED, f.Fd(), 0)
	if errno != 0 {
		return fmt.Errorf("host: map machine code from %s: %w", path, errno)
	}
	if got != addr {
		// Cannot happen with MAP_FIXED; the old mapping is gone either way.
		panic(fmt.Sprintf("host: machine code mapped at %#x, not at %#x", got, addr))
	}
	return nil
}

// openCodeFile opens path read-only after checking it holds exactly code,
// writing it (to a temporary name, then renamed) when it is missing or
// holds anything else.
func openCodeFile(path string, code []byte) (*os.File, error) {
	if f, err := os.Open(path); err == nil {
		if sameContent(f, code) {
			markUsed(path, time.Now()) // for the cache's pruning (cache_use.go)
			return f, nil
		}
		f.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("host: machine code file: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("host: machine code dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".code-*")
	if err != nil {
		return nil, fmt.Errorf("host: machine code file: %w", err)
	}
	_, werr := tmp.Write(code)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("host: write machine code file: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("host: machine code file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("host: machine code file: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("host: machine code file: %w", err)
	}
	if !sameContent(f, code) {
		// Replaced meanwhile by something else: use none of it.
		f.Close()
		return nil, fmt.Errorf("host: machine code file %s changed while written", path)
	}
	return f, nil
}

// sameContent reports whether f holds exactly b. It reads f through a
// temporary mapping, so the comparison leaves nothing on the Go heap.
func sameContent(f *os.File, b []byte) bool {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != int64(len(b)) {
		return false
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, len(b), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return false
	}
	defer syscall.Munmap(m)
	return bytes.Equal(m, b)
}

// dropCodePages unmaps the resident pages of file-backed machine code
// (MADV_DONTNEED: the file's pages stay in the page cache; those executed
// again come back at a minor fault).
func dropCodePages(code []byte) error {
	if len(code) == 0 {
		return nil
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(unsafe.Pointer(unsafe.SliceData(code))), uintptr(len(code)), syscall.MADV_DONTNEED)
	if errno != 0 {
		return errno
	}
	return nil
}
