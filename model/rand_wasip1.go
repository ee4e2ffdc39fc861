//go:build wasip1

package model

import (
	"errors"
	"unsafe"
)

// random_get is WASI's entropy source, the one crypto/rand reads on wasip1.
// Calling it directly keeps crypto/rand, and the FIPS module its package
// initialization brings (about 100 KB of code), out of every plugin.
//
//go:wasmimport wasi_snapshot_preview1 random_get
func randomGet(buf unsafe.Pointer, n uint32) uint32

// errRandomGet is returned when random_get fails.
var errRandomGet = errors.New("random_get failed")

// randomBytes fills b from WASI's random_get.
func randomBytes(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if randomGet(unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b))) != 0 {
		return errRandomGet
	}
	return nil
}
