package host

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
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

// markWazeroEntry marks wazero's compilation cache entry of the module
// wasm (compiled with termination checks and no listeners, as
// compileModule does) as used now, in every wazero-* version directory
// of cacheDir that holds it. It returns the entries marked.
func markWazeroEntry(cacheDir string, wasm []byte, now time.Time) []string {
	if cacheDir == "" {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, "wazero-*"))
	if len(dirs) == 0 {
		return nil
	}
	// wasm.Module.AssignModuleID: sha256 of the binary, then the
	// ensure-termination flag.
	h := sha256.New()
	h.Write(wasm)
	h.Write([]byte{1})
	id := h.Sum(nil)
	name := func(raw uint64) string {
		// wazevo.fileCacheKey: sha256(ID ‖ "WAZEVO" ‖ CPU features, LE).
		k := sha256.New()
		k.Write(id)
		k.Write([]byte("WAZEVO"))
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], raw)
		k.Write(b[:])
		return hex.EncodeToString(k.Sum(nil))
	}
	mark := func(raw uint64) (marked []string) {
		n := name(raw)
		for _, d := range dirs {
			if p := filepath.Join(d, n); markUsed(p, now) {
				marked = append(marked, p)
			}
		}
		return marked
	}
	if raw := wazeroCPURaw.Load(); raw >= 0 {
		if marked := mark(uint64(raw)); marked != nil {
			return marked
		}
	}
	for raw := range uint64(16) {
		if marked := mark(raw); marked != nil {
			wazeroCPURaw.Store(int64(raw))
			return marked
		}
	}
	return nil
}
