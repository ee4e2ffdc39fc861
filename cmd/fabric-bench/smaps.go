package main

import (
	"bufio"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
)

// rssBreakdown splits a process's resident set by what holds it, from
// /proc/self/smaps and runtime/metrics.
type rssBreakdown struct {
	// CodeKiB: anonymous executable mappings (wazero's compiled code
	// where it is not file-backed).
	CodeKiB int64 `json:"code_kib"`
	// CodeFileKiB: plugins' machine code mapped from files (*.code under
	// the compilation cache, host/codefile.go).
	CodeFileKiB int64 `json:"code_file_kib"`
	// GoKiB: the Go runtime's resident memory (heap, stacks, metadata).
	GoKiB int64 `json:"go_kib"`
	// GoHeapKiB: live and unswept Go heap objects.
	GoHeapKiB int64 `json:"go_heap_kib"`
	// OtherAnonKiB: other anonymous mappings, mainly guest linear memories.
	OtherAnonKiB int64 `json:"other_anon_kib"`
	// FileKiB: other file-backed mappings (the binary, shared libraries).
	FileKiB int64 `json:"file_kib"`
}

// readRSSBreakdown reads /proc/self/smaps. The Go runtime's mappings are
// not told apart there; its resident share is estimated from
// runtime/metrics (mapped minus released) and taken from the anonymous rest.
func readRSSBreakdown() rssBreakdown {
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(samples)
	return readRSSBreakdownOf("/proc/self/smaps", int64(samples[0].Value.Uint64()-samples[1].Value.Uint64())>>10,
		int64(samples[2].Value.Uint64()+samples[3].Value.Uint64())>>10)
}

// readRSSBreakdownOf reads the smaps file of a process whose Go runtime
// holds goKiB resident, heapKiB of it heap objects.
func readRSSBreakdownOf(smaps string, goKiB, heapKiB int64) rssBreakdown {
	var r rssBreakdown
	f, err := os.Open(smaps)
	if err != nil {
		return r
	}
	defer f.Close()
	var anon, file, code bool
	var rss int64
	var anonRest int64
	flush := func(exec bool) {
		switch {
		case anon && exec:
			r.CodeKiB += rss
		case anon:
			anonRest += rss
		case code:
			r.CodeFileKiB += rss
		case file:
			r.FileKiB += rss
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch {
		case strings.Contains(fields[0], "-") && len(fields) >= 5 && !strings.HasSuffix(fields[0], ":"):
			// a mapping header: addr perms offset dev inode [path]
			anon = len(fields) == 5 || strings.HasPrefix(fields[5], "[")
			file = !anon
			code = file && strings.HasSuffix(fields[5], ".code")
			rss = 0
		case fields[0] == "Rss:" && len(fields) >= 2:
			rss, _ = strconv.ParseInt(fields[1], 10, 64)
		case fields[0] == "VmFlags:":
			exec := false
			for _, fl := range fields[1:] {
				if fl == "ex" {
					exec = true
				}
			}
			flush(exec)
		}
	}
	r.GoKiB, r.GoHeapKiB = goKiB, heapKiB
	r.OtherAnonKiB = max(0, anonRest-r.GoKiB)
	return r
}

// writeHeapProfile writes a heap profile to path after a GC (a diagnostic:
// FABRIC_BENCH_HEAPPROFILE names the file for a host child).
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	runtime.GC()
	_ = pprof.Lookup("heap").WriteTo(f, 0)
}
