package host

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"
)

// Pruning keeps the most recently used cache entries, so a use must be
// recorded when it happens: under relatime (Linux's default) reading a
// file advances its access time at most daily, and an entry read a
// minute ago would look as old as its last day. Each load therefore sets
// the times of the entries it used: the machine code file it maps
// (fabric-code/<sha256>.code, in openCodeFile) and wazero's entry, found
// here by recomputing the name wazero v1.9.0 gives it (go.mod pins it;
// TestCacheUseMarked fails when the name changes).

// markUsed sets path's access and modification times to now; a missing
// file (pruned meanwhile) is no error: the next load compiles it again.
func markUsed(path string, now time.Time) bool {
	return os.Chtimes(path, now, now) == nil
}

// wazeroCPURaw is the CPU feature word wazero mixes into its entry names
// on this machine, once found (-1 until then): amd64 and arm64 use its
// low 4 bits at most.
var wazeroCPURaw atomic.Int64

func init() { wazeroCPURaw.Store(-1) }

// wazeroVersionDir is the directory wazero keeps its entries in under a
// cache directory, for this binary (internal/version.GetWazeroVersion:
// the wazero version in the build info, "dev" without one, as in test
// binaries), or for test binaries when tests.
func wazeroVersionDir(cacheDir string, tests bool) string {
	ver := ""
	if info, ok := debug.ReadBuildInfo(); ok && !tests {
		for _, dep := range info.Deps {
			if strings.Contains(dep.Path, "github.com/tetratelabs/wazero") {
				ver = dep.Version
			}
		}
		if ver == "" || ver == "(devel)" {
			ver = info.Main.Version
		}
	}
	if ver == "" || ver == "(devel)" {
		ver = "dev"
	}
	return filepath.Join(cacheDir, "wazero-"+ver+"-"+runtime.GOARCH+"-"+runtime.GOOS)
}

// CacheHolds reports whether the compilation cache under cacheDir holds
// the compiled plugin file path, as this binary's host would load it
// (tests: as test binaries would; their entries are kept apart). A file
// that is no wasm module holds nothing to compile: true.
func CacheHolds(cacheDir, path string, tests bool) (bool, error) {
	b, _, _, err := readModuleFile(path, HostMaxFileBytesDefault)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return false, err
		}
		return true, nil // refused before compiling: nothing to cache
	}
	return holdsIn(wazeroVersionDir(cacheDir, tests), b), nil
}

// cacheHoldsModule reports whether the cache under cacheDir holds this
// binary's entry of the plugin file b ("" holds nothing).
func cacheHoldsModule(cacheDir string, b []byte) bool {
	return cacheDir != "" && holdsIn(wazeroVersionDir(cacheDir, false), b)
}

// holdsIn reports whether wazero's version directory dir holds the entry
// of the plugin file b.
func holdsIn(dir string, b []byte) bool {
	w, ensure := compiledForm(b)
	id := wazeroModuleID(w, ensure)
	for _, raw := range cpuRaws() {
		if _, err := os.Stat(filepath.Join(dir, wazeroEntryName(id, raw))); err == nil {
			wazeroCPURaw.Store(int64(raw))
			return true
		}
	}
	return false
}

// compiledForm is what compileModule compiles of the plugin file b (its
// data merged, its loops and function entries instrumented) and whether
// wazero's own termination checks are on (a module instrumentModule
// cannot rewrite: compileModule refuses it, so nothing is cached).
func compiledForm(b []byte) ([]byte, bool) {
	w := compactData(b)
	if iw, err := instrumentModule(w); err == nil {
		return iw, false
	}
	return w, true
}

// wazeroModuleID is wasm.Module.AssignModuleID's ID of wasm compiled as
// compileModule does: sha256 of the binary, then the ensure-termination
// flag, no function listeners.
func wazeroModuleID(wasm []byte, ensureTermination bool) []byte {
	h := sha256.New()
	h.Write(wasm)
	if ensureTermination {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// wazeroEntryName is wazevo.fileCacheKey: sha256(ID ‖ "WAZEVO" ‖ the CPU
// feature word, little-endian), in hex.
func wazeroEntryName(id []byte, raw uint64) string {
	k := sha256.New()
	k.Write(id)
	k.Write([]byte("WAZEVO"))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], raw)
	k.Write(b[:])
	return hex.EncodeToString(k.Sum(nil))
}

// cpuRaws are the CPU feature words to try, the one found before first.
func cpuRaws() []uint64 {
	known := wazeroCPURaw.Load()
	var out []uint64
	if known >= 0 {
		out = append(out, uint64(known))
	}
	for raw := range uint64(16) {
		if int64(raw) != known {
			out = append(out, raw)
		}
	}
	return out
}

// markWazeroEntry marks wazero's compilation cache entry of the module
// wasm (compiled with wazero's termination checks when ensureTermination,
// no listeners, as compileModule does) as used now, in every wazero-*
// version directory of cacheDir that holds it. It returns the entries
// marked.
func markWazeroEntry(cacheDir string, wasm []byte, ensureTermination bool, now time.Time) []string {
	if cacheDir == "" {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "wazero-*"))
	if len(dirs) == 0 {
		return nil
	}
	id := wazeroModuleID(wasm, ensureTermination)
	for _, raw := range cpuRaws() {
		var marked []string
		for _, d := range dirs {
			if p := filepath.Join(d, wazeroEntryName(id, raw)); markUsed(p, now) {
				marked = append(marked, p)
			}
		}
		if marked != nil {
			wazeroCPURaw.Store(int64(raw))
			return marked
		}
	}
	return nil
}
