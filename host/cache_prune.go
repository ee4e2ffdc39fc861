package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// HostCacheMaxBytesDefault is Config.CacheMaxBytes's default: room for
// ~80 compiled Go plugins (~26 MiB each: wazero's entry and the machine
// code file the host maps, fabric-code/, codefile.go).
const HostCacheMaxBytesDefault int64 = 2 << 30

// cacheRecentUse protects entries read this recently from pruning: the
// plugins being loaded now. Under relatime (Linux's default) a read
// advances an entry's access time only when it is a day old, so anything
// shorter than a day would prune entries read a minute ago (seen: test
// hosts evicting one another's compiled fixtures, each then recompiled
// under -race).
const cacheRecentUse = 25 * time.Hour

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
// maxBytes by deleting the least recently used entries first. Every
// version of a plugin ever loaded leaves an entry (~26 MiB for a Go
// plugin), so a host that hot-swaps for months would otherwise fill its
// disk. Use is the entry's access time (under relatime it advances at
// least daily on read) or its modification time, whichever is later;
// entries used within the last 25 hours are kept whatever the size, and a
// deleted entry only costs a recompile. A missing dir is no error.
func PruneCompilationCache(dir string, maxBytes int64, now time.Time) (CachePruneResult, error) {
	type entry struct {
		path string
		size int64
		used time.Time
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
		entries = append(entries, entry{path: path, size: info.Size(), used: used})
		res.Entries++
		res.Bytes += info.Size()
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("host: prune compilation cache %s: %w", dir, err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].used.Before(entries[j].used) })
	total := res.Bytes
	for _, e := range entries {
		if total <= maxBytes || now.Sub(e.used) < cacheRecentUse {
			break
		}
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("host: prune compilation cache: %w", err)
		}
		total -= e.size
		res.Removed++
		res.Freed += e.size
	}
	return res, nil
}
