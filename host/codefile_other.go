//go:build !linux

package host

import "errors"

// fileBackCode is Linux-only: elsewhere the machine code stays in the
// anonymous memory wazero copied it into.
func fileBackCode(code []byte, dir string) error {
	return errors.New("host: file-backed machine code is implemented on Linux only")
}

// dropCodePages is never reached off Linux (no code is file-backed).
func dropCodePages(code []byte) error { return nil }
