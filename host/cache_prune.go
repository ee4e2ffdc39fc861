package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// HostCacheMaxBytesDefault is Config.CacheMaxBytes's default: room for
// ~80 compiled Go plugins (~26 MiB each: wazero's entry and the machine
// code file the host maps, fabric-code/, codefile.go).
const HostCacheMaxBytesDefault int64 = 2 << 30

// cacheRecentUse protects entries used this recently from pruning
// whatever the size: the plugins being loaded now by this host and by
// the others sharing the directory (the parallel test binaries of one
// `make test`, which load the same fixtures over a quarter of an hour),
// which would otherwise evict one another and compile again. Uses are
// recorded when they happen (cache_use.go), so this is minutes, not the
// day relatime would need.
const cacheRecentUse = 30 * time.Minute

// cacheTempAge: a temporary file (an entry being written: wazero's
// "<key>.*.tmp", the host's ".code-*") younger than this is left alone;
// an older one was abandoned by a killed writer and goes first.
const cacheTempAge = time.Hour

// CachePruneResult is what PruneCompilationCache did.
type CachePruneResult struct {
	// Entries and Bytes are what the cache held before pruning.
	Entries int
	Bytes   int64
	// Removed and Freed are the entries deleted and their size.
	Removed int
	Freed   int64
}

// PruneCompilationCache keeps the compilation cache under dir within
// maxBytes: wazero's entries and the machine code files (fabric-code/)
// together, keeping the most recently used. Every version of a plugin
// ever loaded leaves ~26 MiB (a Go plugin's entry and its code file), so
// a host that hot-swaps for months, or a machine running tests of many
// builds, would otherwise fill its disk. Use is the later of a file's
// access and modification times; every load sets both on the files it
// used (markUsed), so the order is right under relatime too. Files used
// within the last 30 minutes are kept even beyond maxBytes (they are
// being loaded now, here or by another host sharing dir); everything
// else beyond it is deleted, oldest first. Abandoned temporary files go
// first. A deleted entry only costs a recompile; a missing dir is no
// error.
func PruneCompilationCache(dir string, maxBytes int64, now time.Time) (CachePruneResult, error) {
	type entry struct {
		path string
		size int64
		used time.Time
		temp bool
	}
	var res CachePruneResult
	var entries []entry
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		used := info.ModTime()
		if at, ok := accessTime(info); ok && at.After(used) {
			used = at
		}
		name := d.Name()
		temp := strings.HasSuffix(name, ".tmp") || strings.HasPrefix(name, ".code-")
		if temp && now.Sub(info.ModTime()) < cacheTempAge {
			return nil // being written
		}
		entries = append(entries, entry{path: path, size: info.Size(), used: used, temp: temp})
		res.Entries++
		res.Bytes += info.Size()
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("host: prune compilation cache %s: %w", dir, err)
	}
	// Most recently used first; abandoned temporary files last.
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].temp != entries[j].temp {
			return !entries[i].temp
		}
		return entries[i].used.After(entries[j].used)
	})
	var kept int64
	full := false // once an entry does not fit, every older one goes too
	for _, e := range entries {
		if !e.temp && !full && kept+e.size > maxBytes {
			full = true
		}
		if !e.temp && (!full || now.Sub(e.used) < cacheRecentUse) {
			kept += e.size
			continue
		}
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("host: prune compilation cache: %w", err)
		}
		res.Removed++
		res.Freed += e.size
	}
	return res, nil
}
