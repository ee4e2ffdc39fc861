//go:build linux

package host

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// mappingRss reads /proc/self/smaps: each mapping's resident bytes by its
// start address.
func mappingRss() map[uintptr]int64 {
	out := map[uintptr]int64{}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return out
	}
	defer f.Close()
	var start uintptr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "Rss:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			out[start] = kb << 10
			continue
		}
		if lo, _, ok := strings.Cut(line, "-"); ok && !strings.Contains(lo, " ") && !strings.Contains(lo, ":") {
			if a, err := strconv.ParseUint(lo, 16, 64); err == nil {
				start = uintptr(a)
			}
		}
	}
	return out
}

// resident counts the resident pages of the instance's linear memories
// (mincore over each mapping).
func (a *instanceMemory) resident() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	for _, lm := range a.mems {
		mm, ok := lm.(*mmapMemory)
		if !ok {
			continue
		}
		mm.mu.Lock()
		buf := mm.buf
		if len(buf) > 0 {
			page := os.Getpagesize()
			vec := make([]byte, (len(buf)+page-1)/page)
			_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(len(buf)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
			if errno == 0 {
				for _, v := range vec {
					if v&1 != 0 {
						n += int64(page)
					}
				}
			}
		}
		mm.mu.Unlock()
	}
	return n
}
