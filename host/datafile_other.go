//go:build !linux

package host

import (
	"errors"

	"github.com/tetratelabs/wazero"
)

// fileBackData is Linux-only: elsewhere the data segments stay on the Go
// heap where wazero decoded them.
func fileBackData(cm wazero.CompiledModule, dir string) (*dataFile, error) {
	return nil, errors.New("host: file-backed data segments are implemented on Linux only")
}

// dataFile is a module's data segments mapped from a file (Linux only).
type dataFile struct{}

// trim is a no-op off Linux.
func (d *dataFile) trim() {}
