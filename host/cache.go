package host

import (
	"sync"

	"github.com/tetratelabs/wazero"
)

// cacheMu serialises wazero.NewCompilationCacheWithDir: wazero v1.9.0
// fills its version string lazily without synchronisation
// (internal/version.GetWazeroVersion), so two hosts or inspections opening
// a cache directory at once race (seen under -race in the CLI tests).
var cacheMu sync.Mutex

func newDirCache(dir string) (wazero.CompilationCache, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	return wazero.NewCompilationCacheWithDir(dir)
}
